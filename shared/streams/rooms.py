"""Rooms: their governance (a preset plus a moderator's changes) and their temperature.

The temperature arithmetic (§8.3) is pure, in `temperature`. A room's temperature lives
in a shared document every citizen changes, `shared/streams/rooms/<room>.json`, only
through `Document.update` - the one read-modify-write under the one lock. Its governance
is the operator's, in a file no citizen can write (`governance`), with `silence_log`:
each silenced set the moderator gave the room, with when - a decision that applied a
silence lifted since stays sound (`floor.silenced_during`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from shared import clock, door
from shared.atomic import CorruptFile, make_dirs, read_json
from shared.documents import Document
from shared.errors import Invalid
from shared.locks import locked
from shared.records import overwrite_in
from shared.streams.decision import Settings
from shared.streams.governance import KEYS, Governance
from shared.streams.temperature import START, cooled, warmed

T = TypeVar("T")

# Rooms that differ from the balanced preset until a moderator sets them. Mail is not
# chat: its citizens fetch it over IMAP seconds apart, so its window is long, and one
# reply per mail is what a person expects (a moderator may allow more).
# Volunteers for work (a debate's participants) are asked by a citizen's wake that waits.
ROOM_DEFAULTS: dict[str, dict[str, Any]] = {
    "mail": {"intention_window_ms": 30_000, "max_responders": 1},
    "volunteers": {"intention_window_ms": 20_000},
}
ROOM_MODE = 0o664  # any citizen heats the room; anyone on the host may read it
# 3775 on the rooms directory, sticky: nobody deletes, renames or replaces a room
# document (or its lock) another wrote - not with a link to a root-only file either. A
# citizen heating another's document rewrites it in place (`overwrite_in`), under its lock.
ROOMS_DIR_MODE = 0o3775
# Any citizen can open a room's lock, so any can hold it: a heat waits at most this
# long (root's presence answers the dashboard's helper within its 30 s, never hangs).
ROOM_WAIT_S = 10.0
_NAME = re.compile(r"[a-z0-9_-]{1,40}")
# Silences are changed by hand (`citizen room set --silence`): a few a month. The cap
# only bounds a runaway script; a decision older than the oldest kept change that named
# a silence of before then is no longer sound (its stream is long over).
SILENCE_LOG_MAX = 500
MAX_ROOM_BYTES = 1_000_000  # a temperature, a time, a flag (and an old room's governance)


class RoomDocument(Document):
    """A room's document; one written before documents carried a `schema_version`
    is read as version 1 (it is rewritten with one at its next change).

    Root changes it too (a person's presence), in a folder citizens write: every access
    walks from `top` without following a link (`shared.door`), reads at most a cap,
    locks and writes through the folder's descriptor - a link in place of the document,
    its lock or the folder leads root nowhere."""

    def __init__(self, path: Path, default: Callable[[], dict[str, Any]], *,
                 top: Path) -> None:
        super().__init__(path, default, mode=ROOM_MODE)
        self.top = top  # the trusted folder above (the commons' streams/, root's)

    def update(self, change: Callable[[dict[str, Any]], T]) -> T:
        """`Document.update`'s read-modify-write, through the folder's descriptor.

        :raises CorruptFile: the document is unusable. :raises OSError: a link or
            anything but a plain file where the folder, the document or its lock is."""
        dfd = door.open_dir(self.path.parent, beneath=self.top)
        try:
            lock = _lock_in(dfd, f".{self.path.name}.lock", self.mode)
            try:
                with locked(self.path, fd=lock, timeout=ROOM_WAIT_S):
                    data = self.read()
                    result = change(data)
                    data["schema_version"] = self.schema_version
                    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
                    overwrite_in(dfd, self.path.name, raw.encode(), self.mode)
            finally:
                os.close(lock)
            os.fsync(dfd)  # the rename's durability (`Document.update` says why after)
        finally:
            os.close(dfd)
        return result

    def read(self) -> dict[str, Any]:
        try:
            data = read_json(self.path, cap=MAX_ROOM_BYTES, beneath=self.top)
        except FileNotFoundError:
            return {"schema_version": self.schema_version, **self.default()}
        if not isinstance(data, dict):
            raise CorruptFile(self.path, "not a JSON object")
        found = data.setdefault("schema_version", self.schema_version)
        if found != self.schema_version:
            raise CorruptFile(self.path, f"schema_version {found!r}, "
                                         f"expected {self.schema_version}")
        return data


class Rooms:
    """The rooms of one commons (`<streams>/rooms/`)."""

    def __init__(self, directory: Path, top: Path, enforce: bool = False) -> None:
        self.dir = directory
        self.top, self.enforce = top, enforce
        self.governance = Governance(top, directory, enforce)

    def document(self, room: str) -> RoomDocument:
        """:raises Invalid: not a room name."""
        if not _NAME.fullmatch(room):
            raise Invalid(f"room names are 1-40 of a-z 0-9 _ - (not '{room}')")
        return RoomDocument(self.dir / f"{room}.json", lambda: {
            "temperature": START, "updated": clock.now()}, top=self.top)

    def names(self) -> list[str]:
        """The rooms with a document (warmed or watched at least once), by name."""
        try:
            found = [p.stem for p in self.dir.glob("*.json")]
        except OSError:  # not made yet
            return []
        return sorted(n for n in found if _NAME.fullmatch(n))

    def room(self, room: str, now: float | None = None) -> dict[str, Any]:
        """The room's document with its governance (`governed`), and `temperature_now`
        (cooled until `now`)."""
        data = {k: v for k, v in self.document(room).read().items() if k not in KEYS}
        return _with_temperature_now({**data, **self.governed(room)}, now)

    def governed(self, room: str) -> dict[str, Any]:
        """The room's preset, changes and `silence_log`, as the operator set them."""
        return self.governance.read(room, _default(room))

    def settings(self, room: str) -> Settings:
        data = self.governed(room)
        return Settings.preset(str(data["preset"]), **data.get("changes", {}))

    def set(self, room: str, preset: str | None = None, **changes: Any) -> dict[str, Any]:
        """The moderator's commands: a preset, thresholds, silence, boosts - written as
        this process (the operator's CLI, root on a server) in the room's settings file.

        :raises Invalid: an unknown preset or setting (nothing is written).
        """
        def change(data: dict[str, Any]) -> dict[str, Any]:
            history = _silence_history(data)
            if preset is not None:
                Settings.preset(preset)  # a clear error for an unknown one
                data["preset"], data["changes"] = preset, dict(ROOM_DEFAULTS.get(room, {}))
            data["changes"] = {**data.get("changes", {}), **changes}
            now = Settings.preset(str(data["preset"]), **data["changes"])  # validates the mix
            if set(now.silenced) != set(history[-1][1] if history else ()):
                history.append((clock.time(), tuple(sorted(now.silenced))))
            data["silence_log"] = [[clock.now(at), list(names)]
                                   for at, names in history[-SILENCE_LOG_MAX:]]
            return {**data}

        done = self.governance.update(room, _default(room), change)
        if self.document(room).path.exists():
            self._update(room, _drop_governance)  # moved: the settings file holds it now
        return done

    def silence_history(self, room: str) -> list[tuple[float, tuple[str, ...]]]:
        """The room's silenced sets, each with when it took effect, oldest first."""
        return _silence_history(self.governed(room))

    def heat(self, room: str, event: str) -> float:
        """A temperature event (human, serviced, present, absent); the new temperature."""
        def change(data: dict[str, Any]) -> float:
            now = clock.time()
            data["temperature"] = warmed(_with_temperature_now(data, now)
                                         .pop("temperature_now"), event)
            data["updated"] = clock.now(now)
            if event in ("present", "absent"):  # a bid records whether a person is here
                data["present"] = event == "present"
            if self.enforce and os.geteuid() != 0:  # a citizen's write: what governance a
                _drop_governance(data)  # room from before kept here counts no more
            return float(data["temperature"])

        return self._update(room, change)

    def _update(self, room: str, change: Callable[[dict[str, Any]], T]) -> T:
        doc = self.document(room)
        make_dirs(self.dir, self.top, ROOMS_DIR_MODE)
        return doc.update(change)


def _lock_in(dfd: int, name: str, mode: int) -> int:
    """The lock file `name` in the open folder `dfd`, opened (made with `mode` when
    missing) without following a link, and only if it is a plain file."""
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 mode, dir_fd=dfd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise door.NotPlain(errno.EINVAL, f"{name} is not a plain file, never taken as a "
                            "room's lock - remove it")
    if info.st_uid == os.geteuid() and info.st_mode & 0o777 != mode:
        os.fchmod(fd, mode)  # the umask narrowed it: every citizen heats the room
    return fd


def _default(room: str) -> dict[str, Any]:
    """A room's governance until the operator sets it."""
    return {"preset": "balanced", "changes": dict(ROOM_DEFAULTS.get(room, {}))}


def _drop_governance(data: dict[str, Any]) -> None:
    for key in KEYS:
        data.pop(key, None)


def _silence_history(data: dict[str, Any]) -> list[tuple[float, tuple[str, ...]]]:
    """`silence_log` as (epoch seconds, names); a room written before the log existed
    counts its silence now as in force since ever (what readers assumed before)."""
    if "silence_log" in data:
        return [(clock.epoch(at), tuple(names)) for at, names in data["silence_log"]]
    silenced = tuple(data.get("changes", {}).get("silenced", ()))
    return [(0.0, silenced)] if silenced else []


def _with_temperature_now(data: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """`data` with its temperature cooled until `now` (default: now) as `temperature_now`;
    `updated` may be any timestamp a room document ever carried."""
    at = clock.time() if now is None else now
    data["temperature_now"] = cooled(float(data["temperature"]), clock.epoch(data["updated"]),
                                     at)
    return data
