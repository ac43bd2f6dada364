"""Who wrote a record in the commons: the Unix owner of its file, not what it claims.

Every record a citizen files (a report, an adoption, a vote) is a file of its own,
so its owner is its author. In server mode a record whose file is owned by anyone
but the citizen it names is refused. In dev mode (one Unix user for everyone) the
check cannot tell citizens apart and is off - `server_mode()` says which applies.
"""

from __future__ import annotations

import grp
import pwd
import socket
import stat
import struct
from pathlib import Path

from shared.errors import NotAllowed

GROUP = "citizens"


class ForgedRecord(NotAllowed):
    """A record claims an author who does not own its file."""


def server_mode(shared_dir: Path) -> bool:
    """Server mode: the commons belongs to group `citizens` (set up by setup_server.sh)."""
    gid = _group_gid()
    return gid is not None and shared_dir.is_dir() and shared_dir.stat().st_gid == gid


_GID: list[tuple[tuple[int, int], int | None]] = []  # ((mtime, inode) of /etc/group, gid)


def _group_gid() -> int | None:
    """The gid of group `citizens`, looked up again only when /etc/group changed: `citizen
    status` asks twice per citizen, and each lookup read the whole group file."""
    try:
        info = Path("/etc/group").stat()
        key = (info.st_mtime_ns, info.st_ino)
    except OSError:
        key = (0, 0)  # no /etc/group (NSS elsewhere): look up every time
    if _GID and _GID[0][0] == key and key != (0, 0):
        return _GID[0][1]
    try:
        gid: int | None = grp.getgrnam(GROUP).gr_gid
    except KeyError:
        gid = None
    _GID[:] = [(key, gid)]
    return gid


def check_author(path: Path, claimed: str, enforce: bool) -> None:
    """Refuse a record whose file is not owned by the citizen it names.

    :raises ForgedRecord: in server mode, the owner differs from `claimed`.
    """
    if not enforce:
        return
    try:
        uid = pwd.getpwnam(claimed).pw_uid
    except KeyError as exc:
        raise ForgedRecord(f"{path} claims to be from {claimed}, who is no user here") from exc
    # lstat, and only a plain file with one name: a symlink or a hard link to another's
    # record elsewhere would carry that record's owner into a place it was never written.
    st = path.lstat()
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        raise ForgedRecord(f"{path} is not a plain file of its own (a link); it is ignored")
    owner = st.st_uid
    if owner != uid:
        raise ForgedRecord(f"{path} claims to be from {claimed} (uid {uid}) but was written "
                           f"by uid {owner}; it is ignored")



def peer_uid(conn: socket.socket) -> int:
    """The caller's UID on a Unix socket, as the kernel recorded it when it connected
    (SO_PEERCRED): nothing the caller sends can change it."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])
