#!/usr/bin/env bash
# Install Experience on a Debian server (run as root). Idempotent: a second run
# changes nothing and says so; a run from a newer checkout commits a new baseline.
#
#   sudo scripts/setup_server.sh                    # the citizens of templates/
#   sudo scripts/setup_server.sh opus mira          # just these
#
# Layout (DESIGN.md §1, DEPLOY.md §8): group `citizens`; /home/shared (3775: setgid,
# sticky); one user and home (0750) per citizen with ~/code a clone of
# /home/shared/baseline; the operator's rules and secrets in /etc/experience; the
# release root runs in /opt/experience/release; dependencies only in
# /opt/experience/venv; units in /etc/systemd/system; `citizen` on the PATH.
#
# Root never runs code or git in anything a citizen can write: the baseline belongs to
# the unprivileged user `experience`, which does every git step there.
set -euo pipefail

source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
shared=/home/shared
prefix=/opt/experience
venv="$prefix/venv"
units=/etc/systemd/system
changes=0

step() { printf '==> %s\n' "$*"; }
changed() { printf '    changed: %s\n' "$*"; changes=$((changes + 1)); }
fail() { printf 'setup_server: FAILED at step: %s\n' "$*" >&2; exit 1; }
trap 'fail "${current:-start} (line $LINENO)"' ERR

current="checking we are root"
[ "$(id -u)" -eq 0 ] || { echo "setup_server: run as root (sudo $0)" >&2; exit 1; }

current="system packages"
step "$current"
missing=()
# bubblewrap: the sandbox of every command a citizen's model runs (citizen/sandbox.py).
for pkg in python3-venv git passwd util-linux bubblewrap; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
    changed "installed ${missing[*]}"
fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || fail "Python >= 3.11 is required (Debian 12 or newer)"

current="group citizens"
step "$current"
if ! getent group citizens >/dev/null; then
    groupadd --system citizens
    changed "group citizens"
fi

current="user experience"
step "$current"
# The baseline's owner: an unprivileged system user in group citizens. Every git step
# in the baseline runs as it, so a hook, fsmonitor or filter a citizen plants there runs
# with no more rights than that citizen already has - never as root.
if ! getent passwd experience >/dev/null; then
    useradd --system --user-group --groups citizens --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin --comment "Experience baseline owner" experience
    changed "user experience"
fi

current="the commons under $shared"
step "$current"
for d in "" library library/modules library/pending tools tools/impl tools/registry \
         tools/tests proposals proposals/records proposals/pending proposals/approved \
         proposals/rejected debates streams monitor monitor/heartbeats doorbell changes memory values; do
    # 3775 root:citizens: every citizen adds to the commons; setgid keeps the group on
    # new files; sticky: nobody removes, renames or replaces what another created.
    # Proposal views are 2775: whoever acts next rewrites them (never trusted, only read).
    mode=3775
    case "$d" in proposals/pending|proposals/approved|proposals/rejected) mode=2775 ;; esac
    if [ ! -d "$shared/$d" ] || [ -L "$shared/$d" ] \
            || [ "$(stat -c '%a %U:%G' "$shared/$d")" != "$mode root:citizens" ]; then
        [ ! -L "$shared/$d" ] || fail "$shared/$d is a symbolic link - remove it and run again"
        install -d -m "$mode" -o root -g citizens "$shared/$d"
        changed "$shared/$d"
    fi
done

current="the release in $prefix/release"
step "$current"
# What root runs (the operator CLI, onboarding): a root-owned copy of this checkout,
# never the citizen-writable baseline or a citizen's ~/code.
release="$prefix/release"
install -d -m 0755 "$prefix"
rm -rf "$release.new"
install -d -m 0755 "$release.new"
tar -C "$source_dir" --exclude=.git --exclude=.venv --exclude=__pycache__ \
    --exclude=.pytest_cache --exclude=.mypy_cache --exclude=.ruff_cache --exclude='*.egg-info' \
    -cf - . | tar -C "$release.new" -xf - --no-same-owner
chown -R root:root "$release.new"
chmod -R go-w,a+rX "$release.new"  # everyone reads and runs it; only root changes it
if [ -d "$release" ] && diff -rq "$release" "$release.new" >/dev/null; then
    rm -rf "$release.new"
else
    rm -rf "$release.old"
    [ ! -d "$release" ] || mv "$release" "$release.old"
    mv "$release.new" "$release"
    rm -rf "$release.old"
    changed "$release"
fi

current="baseline repository $shared/baseline"
step "$current"
baseline="$shared/baseline"
if [ -L "$baseline" ]; then fail "$baseline is a symbolic link - remove it and run again"; fi
if [ ! -d "$baseline" ]; then
    install -d -m 2775 -o experience -g citizens "$baseline"
    changed "$baseline"
elif [ "$(stat -c '%U' "$baseline")" != "experience" ]; then
    # An older install: root owned the baseline. chown -R never follows symlinks (-P).
    chown -R -P experience "$baseline"
    changed "$baseline now owned by user experience"
fi
# Citizens clone and fetch the baseline, which is not theirs: tell git that is expected
# (a local clone checks both the work tree and the .git path).
for safe in "$baseline" "$baseline/.git"; do
    if ! git config --system --get-all safe.directory 2>/dev/null | grep -qx "$safe"; then
        git config --system --add safe.directory "$safe"
        changed "git safe.directory $safe"
    fi
done
# As user experience (umask 0002: the group writes what it makes): the baseline's files
# become exactly the release's - clear the work tree (not .git) and copy it in, so files
# deleted upstream disappear too; git sees what really changed.
# -g citizens: what it creates belongs to the group that merges into the baseline.
out="$(runuser -u experience -g citizens -- sh -s "$baseline" "$release" <<'SH'
set -eu
umask 0002
baseline="$1" release="$2"
if [ ! -d "$baseline/.git" ]; then
    git init --quiet -b main "$baseline"
    echo "changed: git repository $baseline"
fi
# Citizens merge verified changes into the baseline (2/3 adoption), so the group
# writes it; git keeps new objects group-writable with core.sharedRepository=group.
if [ "$(git -C "$baseline" config core.sharedRepository || true)" != "group" ]; then
    git -C "$baseline" config core.sharedRepository group
    echo "changed: baseline shared with group citizens"
fi
find "$baseline" -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {} +
tar -C "$release" -cf - . | tar -C "$baseline" -xf - --no-same-owner --no-overwrite-dir
find "$baseline" -user experience ! -group citizens -exec chgrp citizens {} +
find "$baseline" -user experience -type d ! -perm -2070 -exec chmod g+rwxs {} +
find "$baseline" -user experience -type f ! -perm -0060 -exec chmod g+rw {} +
git -C "$baseline" add -A
if [ -n "$(git -C "$baseline" status --porcelain)" ]; then
    git -C "$baseline" -c user.name="Experience setup" -c user.email="experience@localhost" \
        commit --quiet -m "baseline release at $(date -u +%FT%TZ)"
    echo "changed: baseline commit $(git -C "$baseline" rev-parse --short HEAD)"
fi
SH
)" || fail "updating the baseline as user experience"
if [ -n "$out" ]; then
    printf '%s\n' "$out" | sed 's/^/    /'
    changes=$((changes + $(grep -c '^changed: ' <<<"$out")))
fi

current="dependencies in $venv"
step "$current"
if [ ! -x "$venv/bin/python" ]; then
    install -d -m 0755 "$prefix"
    python3 -m venv "$venv"
    changed "venv $venv"
fi
deps="$(python3 - "$source_dir/pyproject.toml" <<'PY'
import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))
PY
)"
stamp="$venv/.experience-deps-$(printf '%s' "$deps" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    # Only the dependencies: each citizen imports the project from its own ~/code.
    printf '%s\n' "$deps" > "$prefix/requirements.txt"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r "$prefix/requirements.txt"
    rm -f "$venv"/.experience-deps-*
    touch "$stamp"
    changed "dependencies installed"
fi

current="the start guard"
step "$current"
if ! cmp -s "$source_dir/scripts/start_guard.py" "$prefix/start_guard.py"; then
    install -m 0755 "$source_dir/scripts/start_guard.py" "$prefix/start_guard.py"
    changed "$prefix/start_guard.py"
fi

current="the citizen command"
step "$current"
wrapper=/usr/local/bin/citizen
want="#!/bin/sh
# Experience operator CLI: the root-owned release with the server's venv (never the
# citizen-writable baseline - root must not run code a citizen could have changed).
exec env CIV_ROOT=/home PYTHONPATH=$release PYTHONDONTWRITEBYTECODE=1 $venv/bin/python -m citizen \"\$@\""
if [ "$(cat "$wrapper" 2>/dev/null)" != "$want" ]; then
    printf '%s\n' "$want" > "$wrapper"
    chmod 0755 "$wrapper"
    changed "$wrapper"
fi

current="systemd units"
step "$current"
reload=0
for unit in citizen@.service citizens.target; do
    if ! cmp -s "$source_dir/systemd/$unit" "$units/$unit"; then
        install -m 0644 "$source_dir/systemd/$unit" "$units/$unit"
        changed "$units/$unit"
        reload=1
    fi
done
if [ "$reload" -eq 1 ]; then
    systemctl daemon-reload
fi
if ! systemctl is-enabled --quiet citizens.target; then
    systemctl enable --quiet citizens.target
    changed "citizens.target enabled"
fi

current="citizens"
if [ "$#" -gt 0 ]; then
    names=("$@")
else
    mapfile -t names < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["citizens"]))' \
        "$source_dir/templates/citizen_configs.json")
fi
for name in "${names[@]}"; do
    current="citizen $name"
    step "$current"
    out="$(CIV_ROOT=/home PYTHONPATH="$release" PYTHONDONTWRITEBYTECODE=1 \
        "$venv/bin/python" -m citizen onboard "$name")"
    if grep -q '^created ' <<<"$out"; then
        grep '^created ' <<<"$out" | sed 's/^created /    changed: /'
        changes=$((changes + $(grep -c '^created ' <<<"$out")))
    fi
done

trap - ERR
if [ "$changes" -eq 0 ]; then
    echo "setup_server: nothing changed - the server was already set up."
else
    echo "setup_server: done, $changes changes. Next: put ANTHROPIC_API_KEY (optional) and mail"
    echo "settings in /etc/experience/<citizen>.env (the operator's rules go in"
    echo "/etc/experience/<citizen>.json), then: systemctl start citizens.target"
fi
