"""The one lock and the one read-modify-write of a shared JSON document.

`locked(path)` is the only lock in the project (the commons, a citizen's state, the
daemon's single-instance lock, the model file, the semaphore's slots):
- a lock file per locked thing (`.<name>.lock`, never deleted: deleting a lock file
  others may hold open would let two writers in at once);
- a blocking `fcntl.flock`, not `filelock`: measured here with 32 writers on one
  document, filelock's 50 ms polling gives a p99 wait of 0.7-0.9 s (worst 4.9 s, the
  holder keeps winning), while a blocking flock queues in the kernel - see
  bench/documents.py. flock is also released by the kernel when a holder is killed,
  so a crashed citizen never leaves the commons locked.
- `timeout=0` tries once (the daemon's "am I the only one"), `timeout=N` tries for N
  seconds; either raises `LockTimeout`.

`Document` is a shared JSON document changed under that lock: written to a temp file
in the same directory, fsynced, `os.replace`d; `schema_version` checked on every read;
a corrupt or unknown document raises `CorruptFile` naming the file, never reset.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from shared.atomic import CorruptFile, append_line, read_json, write_json
from shared.errors import LockTimeout

T = TypeVar("T")
SCHEMA_VERSION = 1
# 0660: every citizen (group `citizens`) reads and writes the commons; others nothing.
DOCUMENT_MODE = 0o660
_POLL_S = (0.001, 0.002, 0.005, 0.01)  # a bounded try backs off to 10 ms between tries


def lock_path(path: Path) -> Path:
    """The lock file that guards `path` (beside it, hidden)."""
    return path.with_name(f".{path.name}.lock")


@contextmanager
def locked(path: Path, *, timeout: float | None = None, mode: int = DOCUMENT_MODE,
           lock_file: Path | None = None) -> Iterator[float]:
    """Hold the lock of `path`; yields how long we waited for it (seconds).

    `timeout`: None blocks in the kernel's queue; a number of seconds (0: try once)
    raises `LockTimeout` when the lock is still held by then. `lock_file`: lock this
    file itself rather than `.<name>.lock` beside `path`.

    :raises LockTimeout: another holder kept it past `timeout`.
    """
    lock = lock_file or lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, mode)
    try:
        # The umask may have narrowed the mode at creation; group members must be able
        # to open the same lock file, or they could not take the lock at all.
        if os.fstat(fd).st_uid == os.geteuid() and os.fstat(fd).st_mode & 0o777 != mode:
            os.fchmod(fd, mode)
        started = time.monotonic()
        _acquire(fd, lock, timeout, started)
        try:
            yield time.monotonic() - started
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(fd: int, lock: Path, timeout: float | None, started: float) -> None:
    if timeout is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    tries = 0
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            waited = time.monotonic() - started
            if waited >= timeout:
                raise LockTimeout(f"{lock} is held by another process (waited "
                                  f"{waited:.2f} s of {timeout:.2f} s)") from None
            time.sleep(min(_POLL_S[min(tries, len(_POLL_S) - 1)], timeout - waited))
            tries += 1


def is_locked(lock: Path) -> bool:
    """Whether some live process holds `lock` (a lock file itself) right now."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the shared lock we may have taken
    return False


class Document:
    """One shared JSON document with a schema version and a default content."""

    def __init__(self, path: Path, default: Callable[[], dict[str, Any]],
                 schema_version: int = SCHEMA_VERSION, mode: int = DOCUMENT_MODE) -> None:
        self.path = path
        self.default = default
        self.schema_version = schema_version
        self.mode = mode

    def read(self) -> dict[str, Any]:
        """The current content (the default when the document does not exist yet).

        :raises CorruptFile: it does not parse, or has another schema version.
        """
        try:
            data: dict[str, Any] = read_json(self.path, self.schema_version)
        except FileNotFoundError:
            return {"schema_version": self.schema_version, **self.default()}
        return data

    def update(self, change: Callable[[dict[str, Any]], T]) -> T:
        """Read, change and write the document under its lock; returns what `change` returns.

        :raises CorruptFile: the document is unusable; nothing is written.
        """
        with locked(self.path, mode=self.mode):
            data = self.read()
            result = change(data)
            data["schema_version"] = self.schema_version
            write_json(self.path, data, mode=self.mode)
            return result


def append_history(path: Path, record: dict[str, Any]) -> None:
    """Append one record to a JSONL history (append-only; O_APPEND keeps lines whole)."""
    append_line(path, record, mode=DOCUMENT_MODE)


__all__ = ["CorruptFile", "Document", "append_history", "is_locked", "lock_path", "locked"]
