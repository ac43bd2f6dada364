"""A room's governance - its preset, the moderator's changes (thresholds, silenced,
boosted, paused) and `silence_log` - in a file only the operator writes.

`<streams>/room-settings/<room>.json` is written by `Rooms.set` alone: the operator's
`citizen stream room set`, run as root on a server. In server mode (`enforce`) a reader
takes it only when root owns the file and its directory; one a citizen wrote is logged
and ignored, and the preset's defaults apply (the rule `shared.consensus.human` applies
to a human's decisions).

Not beside the room's document in `rooms/`: that directory is group-writable without the
sticky bit (every citizen replaces the room's document as it heats it), so a citizen could
delete or replace root's file there and lift its own silence. `<streams>/` is root's and
sticky; `room-settings/` in it is root's and not group-writable.

Rooms from before kept their governance inside `rooms/<room>.json`: it is read as before
in dev mode, and in server mode only while that document is root's (any citizen's heat
rewrites it, and with it could have rewritten the governance). The first `set` moves it here.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from shared import clock, door
from shared.atomic import CorruptFile, make_dirs, write_json
from shared.locks import locked

log = logging.getLogger(__name__)

T = TypeVar("T")
SETTINGS_DIR = "room-settings"
KEYS = ("preset", "changes", "silence_log")  # what governs a room; the rest is temperature
SCHEMA_VERSION = 1
# 2755: the operator (root on a server) alone writes governance; group `citizens` reads it.
SETTINGS_DIR_MODE = 0o2755
# 0644: written by root, read by every citizen's process; nobody else may change it.
SETTINGS_MODE = 0o644
MAX_BYTES = 1_000_000  # a few settings and at most SILENCE_LOG_MAX silences


class Governance:
    """The rooms' settings files of one commons (`<streams>/room-settings/`)."""

    def __init__(self, streams_dir: Path, rooms_dir: Path, enforce: bool) -> None:
        self.dir = streams_dir / SETTINGS_DIR
        self.top, self.rooms_dir, self.enforce = streams_dir, rooms_dir, enforce

    def path(self, room: str) -> Path:
        return self.dir / f"{room}.json"

    def read(self, room: str, default: dict[str, Any]) -> dict[str, Any]:
        """The room's governance: its settings file's, else (a room from before) its
        document's, else `default` - each only if it counts (see the module).

        :raises CorruptFile: a file that counts does not parse.
        """
        found = trusted(self.path(room), self.enforce, own_dir=True)
        if found is None:
            found = _legacy(self.rooms_dir / f"{room}.json", self.enforce)
        if found is None:
            return dict(default)
        return {k: found[k] for k in KEYS if k in found}

    def update(self, room: str, default: dict[str, Any],
               change: Callable[[dict[str, Any]], T]) -> T:
        """Change the room's governance under its lock and write it as this process
        (root, on a server: the operator's CLI)."""
        self._make_dir()
        path = self.path(room)
        with locked(path, mode=SETTINGS_MODE):
            data = self.read(room, default)
            result = change(data)
            data["schema_version"], data["updated"] = SCHEMA_VERSION, clock.now()
            write_json(path, data, mode=SETTINGS_MODE)
            return result

    def _make_dir(self) -> None:
        """Make `room-settings/`; as root in server mode, a directory a citizen made there
        first is set aside (it would let that citizen delete root's files in it)."""
        if self.enforce and os.geteuid() == 0 and (self.dir.exists() or self.dir.is_symlink()):
            st = os.lstat(self.dir)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
                aside = self.dir.with_name(f"{SETTINGS_DIR}.planted-{int(clock.time())}")
                log.warning("%s was not root's: moved to %s (nothing in it counted)",
                            self.dir, aside)
                os.rename(self.dir, aside)  # root may: `<streams>/` is root's
        make_dirs(self.dir, self.top, SETTINGS_DIR_MODE)


def _legacy(path: Path, enforce: bool) -> dict[str, Any] | None:
    """The governance a room from before kept in its document, if it counts."""
    data = trusted(path, False, own_dir=False)  # any owner first: most carry none
    if data is None or "preset" not in data:
        return None
    return trusted(path, enforce, own_dir=False)  # then logged if not root's


def trusted(path: Path, enforce: bool, *, own_dir: bool) -> dict[str, Any] | None:
    """The JSON object in `path` if it counts: a plain file with one name - in server
    mode root's (and, `own_dir`, in a directory of root's nobody else writes). None when
    there is none or it does not count (logged).

    :raises CorruptFile: a file that counts does not parse or has another schema version.
    """
    def ignored(why: str) -> None:
        log.warning("ignoring %s: %s - only the operator's `citizen stream room set` "
                    "(as root) governs a room", path, why)

    try:
        # O_NOFOLLOW: a link would bring its target's owner and words here.
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        ignored(f"its directory is not one ({exc.strerror})")
        return None
    try:
        if enforce and own_dir:
            st = os.fstat(dir_fd)
            if st.st_uid != 0 or st.st_mode & 0o022:
                ignored(f"its directory is uid {st.st_uid}'s, mode {st.st_mode & 0o7777:o}")
                return None
        raw = _plain_bytes(dir_fd, path, enforce, ignored)
    finally:
        os.close(dir_fd)
    if raw is None:
        return None
    try:
        data = door.loads(raw)  # a room document is any citizen's: a bomb is no governance
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, nested too deep
        raise CorruptFile(path, f"not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise CorruptFile(path, "not a JSON object")
    found = data.setdefault("schema_version", SCHEMA_VERSION)  # rooms from before had none
    if found != SCHEMA_VERSION:
        raise CorruptFile(path, f"schema_version {found!r}, expected {SCHEMA_VERSION}")
    return data


def _plain_bytes(dir_fd: int, path: Path, enforce: bool,
                 ignored: Callable[[str], None]) -> bytes | None:
    try:
        # O_NONBLOCK: a FIFO planted at the name must not hang the reader.
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        ignored(f"not a plain file ({exc.strerror})")
        return None
    try:
        st = os.fstat(fd)
        # A hard link could bring another room's (or another store's) file here.
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            ignored("not a plain file of its own")
            return None
        if enforce and st.st_uid != 0:
            ignored(f"written by uid {st.st_uid}, not by the operator as root")
            return None
        return os.read(fd, MAX_BYTES)
    finally:
        os.close(fd)
