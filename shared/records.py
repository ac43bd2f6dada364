"""Records in the commons: one file per record, its Unix owner its author.

The pattern every protocol here follows (threads of consensus, debates and streams;
changes, reviews, findings, DRY violations, goals): a record is never edited by anyone
but its author, a change of state is a new record, and the state of a thing is derived
from its records when read - never stored twice, so it cannot drift.

This module is the one door to them: `write` stamps the author under the one author
key (`AUTHOR`), `read` is the one reader. A record counts only if it is whole and, in
server mode, its file belongs to the author it names - identity comes from the kernel
(the file's owner, `shared.identity.check_author`), never from what a record says.
Records written before the one author key named their author under another key
(`citizen`, `maintainer`, `by`); they are still read, the name copied to `AUTHOR`.
"""

from __future__ import annotations

import errno
import logging
import os
import pwd
import re
import secrets
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from shared import atomic, clock, door
from shared.atomic import CorruptFile, create_json, replace_in, write_json
from shared.identity import ForgedRecord, check_author

__all__ = ["AUTHOR", "DIR_MODE", "LEGACY_AUTHOR_KEYS", "RECORD_MODE", "add", "beside",
           "besides", "create", "effective_user", "make_dirs", "new_id", "overwrite_in",
           "read", "write"]
log = logging.getLogger(__name__)

AUTHOR = "author"  # the key naming a record's author, in every record of the commons
# Records written before the one author key named their author under these; read
# back, the name is copied to AUTHOR so every protocol sees one key.
LEGACY_AUTHOR_KEYS = ("citizen", "maintainer")
# 0644: the author writes; every citizen (and the operator) reads. Never group-write:
# a peer could rewrite a record in place and it would still carry its author's owner.
RECORD_MODE = 0o644
# 3775 on record directories: group `citizens` adds records (setgid keeps the group),
# and the sticky bit stops a citizen from deleting or replacing another's record.
DIR_MODE = 0o3775
# A record its author had to write beside a file someone pre-created under its name:
# `<name>~<author>-<random>` (no `*.json` glob of a reader lists it by mistake).
ALT = "~"
Accept = Callable[[dict[str, Any]], bool]


def beside(path: Path, author: str) -> Path:
    """A new name for `author`'s record next to a file someone pre-created at `path`."""
    return path.with_name(f"{path.name}{ALT}{author}-{secrets.token_hex(8)}")


def besides(path: Path) -> list[Path]:
    """The records written next to `path` (`beside`), oldest name first."""
    if not path.parent.is_dir():
        return []
    return sorted(path.parent.glob(f"{glob_escape(path.name)}{ALT}*"))


def glob_escape(name: str) -> str:
    """`name` with glob's special characters taken literally."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def new_id(prefix: str) -> str:
    """Time-sortable, unique: `prop-20261122T120000-1a2b`."""
    return f"{prefix}-{clock.moment():%Y%m%dT%H%M%S}-{secrets.token_hex(2)}"


def id_pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(rf"^{prefix}-[0-9T]+-[0-9a-f]{{4}}$")


def effective_user() -> str:
    """The Unix user this process writes as (its records' owner)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def make_dirs(path: Path, top: Path) -> None:
    """Create `path` and any missing parents up to `top`, each with DIR_MODE."""
    atomic.make_dirs(path, top, DIR_MODE)


def _mine(path: Path) -> Path:
    """Where this process writes the record `path`: `path` itself, unless someone else
    created it first (in a sticky directory nobody can replace another's file). Then
    beside it, under a name nobody could guess in advance (`<name>~<user>-<random>`),
    or the one this process made there before; readers take the file its author owns."""
    try:
        owner = path.lstat().st_uid
    except FileNotFoundError:
        return path
    me = os.geteuid()
    # Our own file we may replace; root may replace any (it owns the machine anyway).
    if me in (owner, 0):
        return path
    for alt in besides(path):
        if alt.lstat().st_uid == me:
            return alt
    alt = beside(path, effective_user())
    log.warning("%s was pre-created by uid %d; writing %s instead", path, owner, alt.name)
    return alt


def write(top: Path, path: Path, author: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """Write (or rewrite) `author`'s record at `path`, its directories made up to `top`
    group-addable and sticky; returns what was written. Its file is owned by whoever
    runs this - in server mode only `author`'s own process makes a record that counts."""
    make_dirs(path.parent, top)
    data = {**record, AUTHOR: author}
    write_json(_mine(path), data, mode=RECORD_MODE)
    return data


def add(top: Path, folder: Path, author: str, record: Mapping[str, Any]) -> Path:
    """Add a new record of `author` to `folder` (made up to `top`); returns its path.

    Its name cannot collide: world time to the microsecond, the author, and a random
    part nobody can guess in advance, created exclusively - two records in one second
    both stay, and a file planted at a name is never replaced (another name is drawn).
    """
    make_dirs(folder, top)
    data = {**record, AUTHOR: author}
    for _ in range(8):
        path = folder / f"{clock.moment():%Y%m%dT%H%M%S%f}-{author}-{secrets.token_hex(4)}.json"
        try:
            create_json(path, data, mode=RECORD_MODE)
        except FileExistsError:
            log.warning("%s exists already; drawing another name", path)
            continue
        return path
    raise FileExistsError(f"no free name for a record in {folder}")


def create(top: Path, path: Path, record: dict[str, Any]) -> None:
    """Write one record that may exist only once (a vote): FileExistsError if it does."""
    make_dirs(path.parent, top)
    create_json(path, record, mode=RECORD_MODE)


def read(path: Path, author: str | None, enforce: bool, *,
         legacy: tuple[str, ...] = LEGACY_AUTHOR_KEYS, by_name: bool = False,
         accept: Accept | None = None, beneath: Path | None = None) -> dict[str, Any] | None:
    """The record at `path` (or what its author wrote beside a forgery of it), with its
    author under AUTHOR - if it is whole, names `author` (any author when None), and in
    server mode its file belongs to the author it names; `accept` may demand more. None
    otherwise: a forged, broken or unreadable record is logged and ignored (never
    touched). `legacy`: the keys an older record of this kind named its author under.
    `by_name`: the record's name says whose it is (`reviews/<author>.json`), so an old
    one naming nobody is `author`'s; any other record naming nobody counts for no one.
    `beneath`: no folder below it is followed through a link (a thread's folder is its
    opener's, who could swap it for one)."""
    candidates = ([path] if path.is_file() else []) + (besides(path) if enforce else [])
    for candidate in candidates:
        data = _read_one(candidate, author, enforce, legacy, by_name, beneath=beneath)
        if data is not None and (accept is None or accept(data)):
            return data
    return None


MAX_RECORD_BYTES = 16 * 2**20  # a record is KBs; a peer's sparse giant is no record


def _read_bounded(path: Path, beneath: Path | None = None) -> Any:
    """read_json of a record a peer wrote, through the door: at most MAX_RECORD_BYTES
    (every citizen's gate reads the commons in the server's one scheduler, whose memory
    is everyone's), nested at most 64 deep (a line of `[` raised RecursionError in every
    reader), never from a FIFO or through a link (below `beneath` too).

    :raises CorruptFile: too big, too deep or not JSON. :raises OSError: unreadable,
        not plain."""
    return atomic.read_json(path, cap=MAX_RECORD_BYTES, beneath=beneath)


def _read_one(path: Path, author: str | None, enforce: bool,
              legacy: tuple[str, ...], by_name: bool, *,
              beneath: Path | None = None) -> dict[str, Any] | None:
    try:
        data = _read_bounded(path, beneath)
    except (CorruptFile, OSError) as exc:  # OSError: a record made unreadable (chmod 000)
        log.warning("ignoring %s: %s", path, exc)
        return None
    if not isinstance(data, dict):
        log.warning("ignoring %s: not a record", path)
        return None
    named = data[AUTHOR] if AUTHOR in data else next(
        (data[k] for k in legacy if k in data), author if by_name else None)
    if named is None:
        log.warning("ignoring %s: it names no author", path)
        return None
    if author is not None and str(named) != author:
        log.warning("ignoring %s: it names %s, but the record is %s's", path,
                    named or "nobody", author)
        return None
    try:
        # The kernel's word: in server mode the file's owner must be the named author.
        check_author(path, str(named), enforce)
    except ForgedRecord as exc:
        log.warning("ignoring %s: %s", path, exc)
        return None
    return {**data, AUTHOR: str(named)}


def overwrite_in(dfd: int, name: str, data: bytes, mode: int) -> None:
    """Make `name` in the open directory `dfd` hold `data` - a shared file every citizen
    rewrites (a proposal's view, a room's document) in a sticky folder. Replaced
    atomically when this writer may (its own file, a new one, or root); else, being
    another's file the sticky bit keeps, rewritten in place through a descriptor opened
    without following a link (the file is group-writable). Never through a link.

    :raises OSError: neither is allowed (a link or a FIFO at the name: NotPlain).
    """
    try:
        replace_in(dfd, name, data, mode, sync_dir=False)
        return
    except PermissionError:  # EPERM: the sticky bit keeps another's file from us
        pass
    fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    try:
        info = os.fstat(fd)
        # A second name is a peer's hard link to another group-writable file (a view, a
        # room, a debate's result): writing through it would rewrite that file instead.
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise door.NotPlain(errno.EINVAL, f"{name} is not a plain file of its own; "
                                "not written")
        done = 0  # written over the old bytes, then cut: the file is never empty between
        while done < len(data):
            done += os.pwrite(fd, data[done:], done)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)
