"""The one lock of the project: `locked`, an `fcntl.flock` on a lock file.

Every lock goes through it - the commons' documents, a citizen's state, the daemon's
and the broker's single-instance locks, the model file, the semaphore's slots and
marks, each line appended to a JSONL history, and the quiescent point (each daemon
holds its lock shared while it works, a backup holds them all exclusive):

- a lock file per locked thing (`.<name>.lock` beside it unless `lock_file` says
  otherwise), never deleted: deleting a lock file others may hold open would let two
  writers in at once;
- the kernel drops a flock with its process, `kill -9` included, so a crashed holder
  never leaves anything locked and there is no stale lock to clean up;
- `timeout=None` waits in the kernel's queue (woken the moment the lock is free);
  `timeout=0` tries once (the daemon's "am I the only one"); `timeout=N` tries for N
  seconds; the last two raise `LockTimeout`;
- `shared=True` is a reader's lock: many at once, none while a writer holds it;
- a lock file is opened without following a link and only if it is a regular file,
  so a link or FIFO planted where a lock should be is refused, never followed or
  waited on; `create=False` opens only a lock file that exists (root never creates
  one in a citizen's name); `fd=` locks a descriptor the caller already holds.

Why a blocking flock, not the `filelock` library: filelock waits by polling
(`LOCK_NB`, then sleep 50 ms, retry), so the process that just let go usually takes
the lock again and the others starve; the kernel's queue hands it on in turn.
bench/documents.py (processes doing fsync'd read-modify-write updates of one document,
200 each; run 2026-11 on the 2 shared cores, load average near 4, disk-bound at
about 100 updates/s):

    flock     8 writers:  99 updates/s  wait p50  79 ms  p99  119 ms  max   171 ms
    flock    32 writers:  97 updates/s  wait p50 345 ms  p99  659 ms  max  1425 ms
    filelock  8 writers:  97 updates/s  wait p50 0.2 ms  p99 2040 ms  max  6165 ms
    filelock 32 writers: 117 updates/s  wait p50 0.2 ms  p99 4683 ms  max 13028 ms

flock's waits are each writer's fair turn (32 writers x ~10 ms a turn); filelock's
are a lottery: a little more throughput for a worst wait nine times longer (earlier,
less loaded runs: filelock p99 0.6-0.9 s, worst 4.9-7 s, flock p99 66 ms). filelock
4.3.1, read 2026-11, still offers nothing we need: its `lock_descriptor(blocking=
True)` is the same LOCK_NB poll, and it has no shared flock (its read-write locks are
SQLite or marker files with heartbeats) and no wait in the kernel's queue.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from shared.errors import LockTimeout

# 0660 by default: a lock in the commons is taken by every citizen (group `citizens`).
LOCK_MODE = 0o660
# A bounded wait polls (a blocked flock cannot be given a deadline): 1 ms at first, so
# a short contention is over quickly, then a tenth of the time waited so far, at most
# 100 ms, so a daemon waiting minutes for a backup costs ten tries a second.
_FIRST_POLL_S = 0.001
_LAST_POLL_S = 0.1


def lock_path(path: Path) -> Path:
    """The lock file that guards `path` (beside it, hidden)."""
    return path.with_name(f".{path.name}.lock")


@contextmanager
def locked(path: Path, *, shared: bool = False, timeout: float | None = None,
           mode: int = LOCK_MODE, lock_file: Path | None = None, create: bool = True,
           fd: int | None = None) -> Iterator[float]:
    """Hold the lock of `path`; yields how long we waited for it (seconds).

    `shared`: a reader's lock (LOCK_SH) rather than the exclusive one. `timeout`: None
    blocks in the kernel's queue; a number of seconds (0: try once). `mode`: the lock
    file's mode when we create it. `lock_file`: lock this file itself rather than
    `.<name>.lock` beside `path`. `create=False`: the lock file must exist already.
    `fd`: lock this open descriptor (the caller's to close) instead of opening a file.

    :raises LockTimeout: another holder kept it past `timeout`.
    :raises FileNotFoundError: `create=False` and there is no lock file.
    :raises OSError: the lock file is a symbolic link, a FIFO or anything but a file.
    """
    lock = lock_file or lock_path(path)
    own = _open(lock, mode, create) if fd is None else fd
    try:
        started = time.monotonic()
        _acquire(own, lock, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, timeout, started)
        try:
            yield time.monotonic() - started
        finally:
            fcntl.flock(own, fcntl.LOCK_UN)
    finally:
        if fd is None:
            os.close(own)  # closing would release the lock too; unlocking first is explicit


def _open(lock: Path, mode: int, create: bool) -> int:
    """A descriptor of the lock file `lock`, which is a regular file and no link."""
    if create:  # a lock beside a file not written yet: its directory may be missing too
        lock.parent.mkdir(parents=True, exist_ok=True)
    # O_RDWR: write access is what entitles a user to a lock - a 0640 lock (the daemon's)
    # lets peers read the pid in it but never take it. O_NOFOLLOW: a planted link never
    # makes us create or lock a file elsewhere. O_NONBLOCK: a planted FIFO cannot hang us.
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_CREAT if create else 0)
    fd = os.open(lock, flags, mode)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file, so never taken as a lock - "
                          "remove it and try again", str(lock))
        # The umask may have narrowed `mode` when we created it: group members could not
        # open the lock at all. Only our own file, only when we may create: a lock made
        # by someone else (onboarding's, for a citizen) keeps the mode it was given.
        if create and info.st_uid == os.geteuid() and info.st_mode & 0o777 != mode:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _acquire(fd: int, lock: Path, op: int, timeout: float | None, started: float) -> None:
    if timeout is None:
        fcntl.flock(fd, op)  # the kernel's queue: no polling, woken when it is free
        return
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            waited = time.monotonic() - started
            if waited >= timeout:
                raise LockTimeout(f"{lock} is held by another process (waited "
                                  f"{waited:.2f} s of {timeout:.2f} s)") from None
            pause(waited, timeout)


def pause(waited: float, timeout: float) -> None:
    """One step of a bounded wait for something another process holds (a flock, or a
    lease on several servers): 1 ms at first, then a tenth of the time waited so far, at
    most 100 ms, never past `timeout`."""
    time.sleep(min(max(waited / 10, _FIRST_POLL_S), _LAST_POLL_S, timeout - waited))


def is_locked(lock: Path) -> bool:
    """Whether some live process holds `lock` (a lock file itself) exclusively now."""
    try:
        with locked(lock, lock_file=lock, shared=True, timeout=0, create=False):
            return False
    except FileNotFoundError:
        return False
    except LockTimeout:
        return True


def holders(of: int | os.stat_result) -> list[tuple[int, int]]:
    """(pid, uid) of every process that holds a lock on a file - an open descriptor, or a
    file's (l)stat - now (uid -1: a process we may not see, so no process of our own
    user), from /proc/locks, which takes no lock (taking one, even shared, could make its
    owner's own start fail). A flock needs only a descriptor, any descriptor: a reader of
    a file can hold it too, so who holds a lock is asked of the kernel."""
    info = os.fstat(of) if isinstance(of, int) else of
    # The kernel names a locked file "major:minor:inode" (device numbers in hex).
    mine = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks", "rb") as table:  # noqa: PTH123 - the kernel's, not a citizen's
            lines = table.read(1 << 22).decode().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if mine in fields and len(fields) > 4 and fields[4].isdigit():
            pid = int(fields[4])
            try:
                found.append((pid, Path(f"/proc/{pid}").stat().st_uid))
            except OSError:  # hidden from us (a unit's ProtectProc=invisible hides other
                found.append((pid, -1))  # users' processes, never our own), or gone since
    return found


__all__ = ["LOCK_MODE", "holders", "is_locked", "lock_path", "locked"]
