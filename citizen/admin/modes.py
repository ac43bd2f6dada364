"""Modes that mean what they say, for what a citizen owns where others look: its
doorbell folder, its heartbeat, its daemon's lock - and their repair on upgrade
(`citizen onboard`, which scripts/setup_server.sh runs for every citizen it installs).

Root repairs through descriptors (shared/door.py): each thing is opened without
following a link, checked to be the citizen's own, and then fchmod'ed - never chmod by a
name the citizen could have swapped for a link to /etc.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import sys

from citizen.config import paths
from shared import door
from shared.layout import SHARED_FILES_MODE

# 3770: peers ring (group write, setgid keeps group `citizens`); sticky: a peer removes
# no other's ring (2770 let any peer delete the rings that wake a citizen); the owner's
# wakes remove them all; nobody else looks in.
DOORBELL_MODE = 0o3770
# 0644: peers read it (PEER_MONITOR); only its daemon writes it (0664 let a peer rewrite
# a citizen's state, pid and next wake in status and the dashboard).
HEARTBEAT_MODE = 0o644
# 0600: a flock needs only a descriptor, so a lock a peer can open is one it can hold.
DAEMON_LOCK_MODE = 0o600


def repair_modes(name: str, uid: int, gid: int) -> list[str]:
    """Give citizen `name`'s doorbell, heartbeat and daemon lock the modes above when
    they are its own (what another user planted there is left, and said); what changed."""
    home = paths.home(name)
    changed: list[str] = []
    try:
        fd = door.open_dir(home.doorbell)
    except OSError as exc:
        return [f"note: {home.doorbell} left as it is ({exc})"]
    try:
        info = os.fstat(fd)
        if info.st_uid != uid or info.st_gid != gid:  # its wakes remove the rings
            os.fchown(fd, uid, gid)
            changed.append(str(home.doorbell))
        if stat.S_IMODE(info.st_mode) != DOORBELL_MODE:
            os.fchmod(fd, DOORBELL_MODE)
            changed.append(f"{home.doorbell}: mode {DOORBELL_MODE:o}")
    finally:
        os.close(fd)
    for path, mode in ((home.heartbeat, HEARTBEAT_MODE), (home.daemon_lock, DAEMON_LOCK_MODE)):
        try:
            with door.open_plain(path) as f:
                info = os.fstat(f.fileno())
                if info.st_uid == uid and stat.S_IMODE(info.st_mode) != mode:
                    os.fchmod(f.fileno(), mode)
                    changed.append(f"{path}: mode {mode:o}")
        except FileNotFoundError:
            continue
        except OSError as exc:
            changed.append(f"note: {path} left as it is ({exc})")
    return changed


def repair_rooms(group: str = "citizens") -> list[str]:
    """The rooms' folder (`streams/rooms`) root's and 3775: before, the first citizen to
    warm a room made it, 2775 and its own - it could swap the folder for a link under
    root's presence marks. Made or repaired through descriptors; what changed."""
    streams = paths.commons_layout().streams
    gid = grp.getgrnam(group).gr_gid
    fd = door.open_dir(streams)  # root's own, made by setup
    try:
        try:
            os.mkdir("rooms", 0o700, dir_fd=fd)  # 0700 until it is root:citizens 3775
            made = True
        except FileExistsError:
            made = False
        rooms = os.open("rooms", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        info = os.fstat(rooms)
        if made or (info.st_uid, info.st_gid) != (0, gid) \
                or stat.S_IMODE(info.st_mode) != SHARED_FILES_MODE:
            os.fchown(rooms, 0, gid)
            os.fchmod(rooms, SHARED_FILES_MODE)
            return [f"{streams / 'rooms'}: root:{group}, mode {SHARED_FILES_MODE:o}"]
        return []
    finally:
        os.close(rooms)


def main(argv: list[str]) -> int:
    """`python -m citizen.admin.modes [--commons] NAME...` (root, from
    scripts/setup_server.sh on an upgrade): repair the commons' rooms folder
    (`--commons`) and each citizen's modes; one `changed: ...` line per change."""
    if argv[:1] == ["--commons"]:
        argv = argv[1:]
        for line in repair_rooms():
            print(f"changed: {line}")
    for name in argv:
        user = pwd.getpwnam(name)
        for line in repair_modes(name, user.pw_uid, user.pw_gid):
            print(line if line.startswith("note: ") else f"changed: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
