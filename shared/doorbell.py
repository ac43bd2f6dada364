"""The doorbell: event files that wake a citizen promptly (`shared/doorbell/<name>/`).

Anyone with a reason - a new task, a vote owed, a debate turn - rings by writing a
small JSON file; the citizen's daemon watches the directory (inotify) and starts an
out-of-slot wake of the requested type. Files are written atomically (a hidden temp
file renamed into place), so a watcher never reads half an event.
"""

from __future__ import annotations

import os
import stat
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from shared import clock, door
from shared.atomic import write_json


@dataclass(frozen=True)
class Ring:
    """One doorbell event."""

    path: Path
    wake_type: str
    reason: str
    sender: str


def ring(directory: Path, wake_type: str, reason: str, sender: str = "operator",
         owner: tuple[int, int] | None = None) -> Path:
    """Ring a citizen's doorbell (`owner`: hand the file to the citizen when root rings)."""
    name = f"{time.time_ns()}-{os.getpid()}-{wake_type}.json"
    path = directory / name
    # 0660: rung by other citizens (group `citizens`), removed by the owner's daemon.
    write_json(path, {"wake_type": wake_type, "reason": reason, "sender": sender,
                      "ts": clock.now()}, mode=0o660, owner=owner)
    return path


def drain(directory: Path) -> list[Ring]:
    """Take every pending event (oldest first), removing its file. Unreadable ones are skipped."""
    rings: list[Ring] = []
    if not directory.is_dir():
        return rings
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        # A peer may ring (3770), so a peer may plant a FIFO, a link or a parser bomb
        # here: read as the scheduler does (_read_ring), never hung or crashed by one.
        for entry in sorted(n for n in os.listdir(fd) if not n.startswith(".")):  # noqa: PTH208
            path = directory / entry
            data = _read_ring(fd, entry)
            if data is None:
                with suppress(FileNotFoundError):  # kept for inspection, out of the way
                    os.rename(entry, f".{entry}.unreadable", src_dir_fd=fd, dst_dir_fd=fd)
                continue
            rings.append(Ring(path, str(data["wake_type"]), str(data.get("reason", "")),
                              str(data.get("sender", "?"))))
            with suppress(FileNotFoundError):
                os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    return rings


MAX_RING_BYTES = 4096  # a ring is a few hundred bytes; anything larger is not one


def peek(directory: Path, owner: int) -> list[Ring]:
    """Every pending event, read and left where it is (oldest first): how the server's
    scheduler hears a citizen's doorbell, whose files it may not remove (the wake it
    starts removes them, as the citizen). Read as data from a folder the citizen owns:
    the folder is opened without following a link and must be `owner`'s; each event is
    opened without following one, and must be a small regular file - else it is skipped,
    so a planted link makes the reader read nothing of where it points.

    :raises PermissionError: the folder is a link, or not `owner`'s (the fix: make it
        the citizen's own folder again - `citizen doctor` says how)."""
    # O_NOFOLLOW | O_DIRECTORY: a symlink planted at the folder fails here, not later.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if (uid := os.fstat(fd).st_uid) != owner:
            raise PermissionError(f"{directory} is not the citizen's own folder (uid {uid}, "
                                  f"not {owner}); not read")
        rings: list[Ring] = []
        # listdir of the descriptor: the folder we checked, not a name swapped since.
        for entry in sorted(n for n in os.listdir(fd) if not n.startswith(".")):  # noqa: PTH208
            data = _read_ring(fd, entry)
            if data is not None:
                rings.append(Ring(directory / entry, str(data["wake_type"]),
                                  str(data.get("reason", "")), str(data.get("sender", "?"))))
        return rings
    finally:
        os.close(fd)


def _read_ring(dir_fd: int, entry: str) -> dict[str, object] | None:
    try:
        # O_NOFOLLOW | O_NONBLOCK: never a link's target, never stuck on a planted FIFO.
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RING_BYTES:
            return None
        data = door.loads(os.read(fd, MAX_RING_BYTES + 1))  # 4 KiB of `[`: RecursionError
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or not isinstance(data.get("wake_type"), str):
        return None
    return data


def consume(directory: Path, names: list[str]) -> int:
    """Remove the events `names` (plain file names the scheduler read) from the citizen's
    own doorbell; the count removed. A name that is not a plain file name is ignored."""
    removed = 0
    for name in names:
        if not name or "/" in name or name.startswith(".") or name in (".", ".."):
            continue
        try:
            (directory / name).unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed
