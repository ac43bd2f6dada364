"""Admission control for the shared model (§10.4): a cross-process counting semaphore.

    <dir>/slot-<k>.lock   one lock file per slot; a slot is held by holding its lock
    <dir>/waiting/<mark>  one file per waiter, locked by it while it waits

Slots are `shared.locks.locked` - the one lock: a holder that dies releases its slot,
since the kernel drops a dead process's flock. The queue depth - the ambient
`pressure` others read - counts the waiting marks whose lock is held; a mark whose
waiter was killed (SIGKILL leaves no `finally`) is unlocked, so it is not counted and
is removed by the next reader.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from shared.atomic import make_dirs
from shared.errors import LockTimeout
from shared.locks import is_locked, locked

# 2775 without the sticky bit: any citizen must be able to remove a dead waiter's mark.
DIR_MODE = 0o2775
LOCK_MODE = 0o660  # slot locks and marks: every citizen (group) opens them, others nothing


class Semaphore:
    """`size` slots shared by every process that opens the same directory."""

    def __init__(self, directory: Path, size: int, top: Path | None = None) -> None:
        self.dir = directory
        self.size = max(1, size)
        self.top = top  # directories are made (with DIR_MODE) up to here
        self._held: ExitStack | None = None

    @property
    def waiting_dir(self) -> Path:
        return self.dir / "waiting"

    def pressure(self) -> int:
        """How many processes wait for a slot now (dead waiters' marks are removed)."""
        if not self.waiting_dir.is_dir():
            return 0
        live = 0
        for mark in self.waiting_dir.iterdir():
            if is_locked(mark):
                live += 1
            else:  # its waiter is gone: a mark is visible only while its lock is held
                mark.unlink(missing_ok=True)
        return live

    @contextmanager
    def waiting(self) -> Iterator[Path]:
        """Be counted in `pressure` while inside: a mark, locked before it is visible."""
        make_dirs(self.waiting_dir, self.top, DIR_MODE)
        name = f"{os.getpid()}-{time.monotonic_ns()}"
        hidden = self.dir / f".mark-{name}"
        # Locked under a hidden name, then renamed in: a reader never sees an unlocked
        # live mark (it would take it for a dead waiter's and remove it).
        with locked(hidden, lock_file=hidden, mode=LOCK_MODE):
            mark = self.waiting_dir / name
            os.rename(hidden, mark)
            try:
                yield mark
            finally:
                mark.unlink(missing_ok=True)

    def acquire(self, timeout_s: float = 60.0, every_s: float = 0.01) -> float:
        """Take a slot; returns seconds waited.

        :raises LockTimeout: none came free within `timeout_s`.
        """
        started = time.monotonic()
        with self.waiting():
            while True:
                for k in range(self.size):
                    held = ExitStack()
                    try:
                        held.enter_context(locked(self.dir / f"slot-{k}", timeout=0,
                                                  lock_file=self.dir / f"slot-{k}.lock",
                                                  mode=LOCK_MODE))
                    except LockTimeout:
                        continue
                    self._held = held
                    return time.monotonic() - started
                if time.monotonic() - started > timeout_s:
                    raise LockTimeout(f"no slot of {self.dir} came free within {timeout_s} s "
                                      f"({self.size} slots)")
                time.sleep(every_s)

    def release(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None

    @contextmanager
    def slot(self, timeout_s: float = 60.0) -> Iterator[float]:
        waited = self.acquire(timeout_s)
        try:
            yield waited
        finally:
            self.release()
