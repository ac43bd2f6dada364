#!/usr/bin/env bash
# Remove a citizen from this server, leaving no file of it behind (run as root;
# DEPLOY.md §7). Its snapshots in the backup repository stay (take one first:
# `citizen backup now`); the broker's ledger keeps its spending, an onboarding request
# that asked for it stays in the broker's history.
#
#   sudo scripts/remove_citizen.sh nova
#
# It goes: the unit (stopped, disabled, its drop-ins), the Unix user, the home and what
# a restore set aside of it, /etc/experience/<name>.{env,json,mail.env}, its corners of
# the commons (doorbell, heartbeat, quiescent-point lock), the records it wrote in the
# commons and anything else its uid owns in /home, /tmp, /var/tmp and /dev/shm. Idempotent: a second run (or
# one after a removal by hand) removes what is left.
set -euo pipefail

name="${1:-}"
shared=/home/shared
units=/etc/systemd/system
fail() { printf 'remove_citizen: %s\n' "$*" >&2; exit 1; }

[ -n "$name" ] || fail "usage: $0 NAME (sudo $0 nova)"
[ "$(id -u)" -eq 0 ] || fail "run as root (sudo $0 $name)"
# Paths are built from the name: only a citizen's name (citizen/config/paths.py NAME_RE).
[[ "$name" =~ ^[a-z][a-z0-9_-]{0,30}$ ]] || fail "$name is not a citizen's name"
[ "$name" != shared ] || fail "shared is the commons, not a citizen"
uid=""
if getent passwd "$name" >/dev/null; then
    # Only a citizen (primary group citizens) is removed: never another user of this machine.
    [ "$(id -gn "$name")" = citizens ] || fail "$name is not a citizen (its primary group is not citizens)"
    uid="$(id -u "$name")"
fi
say() { printf '    removed: %s\n' "$*"; }

# Its daemon's unit, and its wake unit under the server's scheduler (docs/architecture.md §7).
for unit in "citizen@$name.service" "citizen-wake@$name.service"; do
    if systemctl is-enabled --quiet "$unit" 2>/dev/null || systemctl is-active --quiet "$unit"; then
        # a running wake finishes first (the unit's stop); --now on a static unit only stops it
        systemctl disable --quiet --now "$unit" 2>/dev/null || systemctl stop "$unit"
        say "$unit (stopped, disabled)"
    fi
    if [ -e "$units/$unit.d" ] || [ -L "$units/$unit.d" ]; then
        rm -rf "$units/$unit.d"  # its network drop-in (citizen/admin/network.py) and any other
        systemctl daemon-reload
        say "$units/$unit.d"
    fi
    systemctl reset-failed "$unit" 2>/dev/null || true
done

if [ -n "$uid" ]; then
    # The unit's stop ended its processes; any other (a shell of the operator's as it) is named.
    if pgrep -u "$uid" >/dev/null; then
        fail "$name still runs processes ($(pgrep -u "$uid" | tr '\n' ' ')) - stop them (pkill -u $name), then run this again"
    fi
fi

for f in "/etc/experience/$name.env" "/etc/experience/$name.json" \
         "/etc/experience/$name.mail.env"; do
    if [ -e "$f" ] || [ -L "$f" ]; then rm -f "$f"; say "$f"; fi
done
# rm -rf removes a link itself, never what it points to: nothing the citizen planted in
# its home or its corners of the commons leads root outside them.
# /home/.<name>.before-restore-<time>: what a restore set aside (citizen/admin/backup.py).
for p in "/home/$name" /home/."$name".before-restore-* "$shared/doorbell/$name" \
         "$shared/monitor/heartbeats/$name.json" "$shared/monitor/quiesce/$name.lock"; do
    if [ -e "$p" ] || [ -L "$p" ]; then rm -rf --one-file-system "$p"; say "$p"; fi
done

if [ -n "$uid" ]; then
    # What it wrote elsewhere in the commons: its records go. No reader counts a record
    # whose author has no user, and a later user given the same uid must not become their
    # author. Directories it opened stay for the peers' records in them, root's now (as
    # when root decides in one): find -delete and chown -h never follow a link.
    gone="$({ find "$shared" /tmp /var/tmp /dev/shm -xdev -uid "$uid" ! -type d -print \
        -delete 2>/dev/null || true; } | wc -l)"
    [ "$gone" -eq 0 ] || say "$gone files $name wrote in $shared and the temporary directories"
    # -execdir, not -exec: chown gets ./NAME in the directory find holds open, never a
    # path a peer could swap a parent of for a link between find's listing and chown.
    kept="$({ find "$shared" /tmp /var/tmp /dev/shm -xdev -uid "$uid" -type d -print \
        -execdir chown -h root {} + 2>/dev/null || true; } | wc -l)"
    [ "$kept" -eq 0 ] || say "$name's ownership of $kept directories of the commons (now root's)"
    userdel "$name"
    say "user $name"
fi
if systemctl is-active --quiet experience-scheduler.service; then
    # It lists the citizens when it starts: a restart forgets this one (its wakes are
    # their own units; its counters are on disk).
    systemctl try-restart experience-scheduler.service
    say "$name from the scheduler (restarted)"
fi
echo "remove_citizen: $name is gone (its snapshots stay in the backup repository)."
