"""The civilization's quiescent point: each daemon writes under its own lock, held
shared; a backup takes every citizen's lock exclusively, so a snapshot never holds a
wake's half-done work.

`shared/monitor/quiesce/<name>.lock`, one per citizen: on a server the directory is
root's (0755) and the file the citizen's (0600) - nobody else can open it, so no
citizen can take another's lock and freeze its daemon, and none can swap its own for
a link or a FIFO (the directory is not theirs). A daemon holds its lock shared around
each wake, roll-up, log sweep and mail poll; the backup holds them all exclusive
while it reads. Both sides wait a bounded time: a backup that stalls never freezes a
daemon for more than WORK_WAIT_S, and a citizen that holds its lock forever only
makes the snapshot say it was not quiescent. The kernel drops a flock with its
process, so a backup killed with -9 leaves nobody waiting.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from citizen import paths
from shared.identity import server_mode
from shared.layout import Layout

log = logging.getLogger(__name__)
WORK_WAIT_S = 1800.0  # a daemon waits this long for a backup, then works anyway
POLL_S = 0.2


def lock_dir() -> Path:
    return Layout(paths.shared_dir()).quiesce


def lock_path(name: str) -> Path:
    return lock_dir() / f"{paths.check_name(name)}.lock"


def prepare(name: str, uid: int, gid: int) -> list[str]:
    """Root, at onboarding: the citizen's lock file, its own (0600) in root's directory."""
    made = []
    directory = lock_dir()
    if not directory.is_dir():
        directory.mkdir(mode=0o755, parents=True)  # root's: no citizen adds or swaps a lock
        made.append(str(directory))
    path = lock_path(name)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.fchown(fd, uid, gid)
        os.close(fd)
        made.append(str(path))
    return made


def _open(path: Path, create: bool) -> int:
    # O_NOFOLLOW: never through a link; O_NONBLOCK: a FIFO cannot hang the open; only a
    # regular file is a lock. Read access is all a flock needs.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_CREAT if create else 0)
    fd = os.open(path, flags, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def _take(fd: int, mode: int, deadline: float) -> bool:
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


@contextlib.contextmanager
def working(name: str, wait_s: float = WORK_WAIT_S) -> Iterator[None]:
    """Held (shared) by citizen `name`'s daemon while it writes; waits while a backup
    reads - at most `wait_s`, then works anyway, saying so."""
    try:
        if not lock_dir().is_dir():
            lock_dir().mkdir(parents=True, exist_ok=True)  # dev mode: made on first use
        fd = _open(lock_path(name), create=True)
    except OSError as exc:  # never stop a wake for the backup's sake: say so, go on
        log.warning("no quiescent-point lock for %s (%s): a backup may catch this work "
                    "midway - run citizen onboard %s", name, exc, name)
        yield
        return
    try:
        if not _take(fd, fcntl.LOCK_SH, time.monotonic() + wait_s):
            log.warning("a backup held %s's lock for %.0f s: working anyway", name, wait_s)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def still(names: list[str], wait_s: float) -> Iterator[list[str]]:
    """Held (exclusive) by a backup over every citizen in `names`; yields those that
    were NOT quiet within `wait_s` (empty: a quiescent point) - the backup goes on."""
    # On a server root never creates a citizen's lock (onboarding does, as the
    # citizen's); in dev mode everything is the operator's, made on first use.
    create = not server_mode(paths.shared_dir())
    fds: dict[str, int] = {}
    busy = []
    try:
        if create:
            lock_dir().mkdir(parents=True, exist_ok=True)
        for name in names:
            try:
                fds[name] = _open(lock_path(name), create)
            except OSError as exc:
                log.warning("no lock for %s (%s): its daemon is not held back", name, exc)
                busy.append(name)
        deadline = time.monotonic() + wait_s
        pending = dict(fds)
        while pending:  # round by round: a daemon between wakes is caught in its gap
            for name, fd in list(pending.items()):
                if _take(fd, fcntl.LOCK_EX, 0):
                    del pending[name]
            if pending and time.monotonic() >= deadline:
                busy += sorted(pending)
                break
            if pending:
                time.sleep(POLL_S)
        yield busy
    finally:
        for fd in fds.values():
            os.close(fd)
