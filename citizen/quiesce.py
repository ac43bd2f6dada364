"""The civilization's quiescent point: daemons write under a shared lock, a backup
takes it exclusively, so a snapshot never holds a wake's half-done work.

Every daemon holds `shared/monitor/quiesce.lock` shared (flock LOCK_SH) around each
wake, roll-up, log sweep and mail poll; the backup holds it exclusive while it reads,
which waits for running wakes to end and holds new ones back. The kernel drops a flock
with its process, so a backup killed with -9 never leaves the daemons stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

from citizen import paths

log = logging.getLogger(__name__)


def lock_path() -> Path:
    return paths.shared_dir() / "monitor" / "quiesce.lock"


def _open() -> int:
    # O_NOFOLLOW: a link planted in the commons never redirects the open. 0644: on a
    # server setup makes it root's (no citizen can remove it from the sticky dir);
    # a flock needs only read access.
    return os.open(lock_path(), os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)


@contextlib.contextmanager
def working() -> Iterator[None]:
    """Held (shared) by a daemon while it writes; waits while a backup reads."""
    try:
        fd = _open()
    except OSError as exc:  # never stop a wake for the backup's sake: say so, go on
        log.warning("no quiescent-point lock at %s (%s): a backup may catch this wake "
                    "midway", lock_path(), exc)
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def still(wait_s: float) -> Iterator[bool]:
    """Held (exclusive) by a backup: True when every daemon is between writes, False
    when one stayed busy for `wait_s` (the backup then goes on and says so)."""
    lock_path().parent.mkdir(parents=True, exist_ok=True)
    fd = _open()
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                quiet = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    quiet = False
                    break
                time.sleep(0.2)  # new shared holders can slip in; polling gets a gap
        yield quiet
    finally:
        os.close(fd)
