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
makes the snapshot say it was not quiescent. The lock is the one lock
(`shared.locks.locked`): the kernel drops it with its process, so a backup killed
with -9 leaves nobody waiting, and it never opens a link or a FIFO as a lock.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from citizen.config import paths
from shared.errors import LockTimeout
from shared.identity import server_mode
from shared.locks import locked

log = logging.getLogger(__name__)
WORK_WAIT_S = 1800.0  # a daemon waits this long for a backup, then works anyway
ROUND_S = 0.2  # a backup waits this long on one busy daemon, then tries the next one
MODE = 0o600  # the citizen's alone: no other citizen can take it and freeze its daemon


def lock_dir() -> Path:
    return paths.commons_layout().quiesce


def lock_path(name: str) -> Path:
    return lock_dir() / f"{paths.check_name(name)}.lock"


def _untrusted() -> str:
    """Why the lock directory is no place for a lock on a server ('' when it is root's):
    shared/monitor is the citizens', so one may have made monitor/quiesce (or a link)
    before root did - its owner could swap any lock in it for one it holds."""
    if not server_mode(paths.shared_dir()):
        return ""
    try:
        info = lock_dir().lstat()
    except FileNotFoundError:
        return ""
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return f"{lock_dir()} is not root's directory (a link or no directory)"
    if info.st_uid != 0 or info.st_mode & 0o022:
        return f"{lock_dir()} is not root's directory (uid {info.st_uid}, " \
               f"mode {info.st_mode & 0o7777:o})"
    return ""


def _not_own(name: str) -> str:
    """Why this process may not wait on `name`'s lock on a server ('' when it may): a
    lock file left from a planted directory root has since taken over is its planter's."""
    path = lock_path(name)
    if not server_mode(paths.shared_dir()) or not os.path.lexists(path):
        return ""
    owner = path.lstat().st_uid
    return "" if owner == os.geteuid() else f"{path} is not this user's (uid {owner})"


def prepare(name: str, uid: int, gid: int) -> list[str]:
    """Root, at onboarding: the citizen's lock file, its own (0600) in root's directory."""
    made = []
    directory = lock_dir()
    refused = _untrusted()  # why: a planted directory would let its owner swap this lock
    if refused:
        raise OSError(errno.EPERM, f"{refused}: remove it and onboard again")
    if not directory.is_dir():
        directory.mkdir(mode=0o755, parents=True)  # root's: no citizen adds or swaps a lock
        made.append(str(directory))
    path = lock_path(name)
    if os.path.lexists(path) and path.lstat().st_uid != uid:  # why: a planted lock, kept
        raise OSError(errno.EPERM, f"{path} is not {name}'s: remove it and onboard again")
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, MODE)
        os.fchown(fd, uid, gid)
        os.close(fd)
        made.append(str(path))
    return made


def _create() -> bool:
    # On a server onboarding made each lock (the citizen's, in root's directory): neither
    # a daemon nor root's backup creates one there. In dev mode all is the operator's,
    # made on first use.
    return not server_mode(paths.shared_dir())


@contextlib.contextmanager
def working(name: str, wait_s: float = WORK_WAIT_S) -> Iterator[None]:
    """Held (shared) by citizen `name`'s daemon while it writes; waits while a backup
    reads - at most `wait_s`, then works anyway, saying so."""
    with contextlib.ExitStack() as hold:
        try:
            refused = _untrusted() or _not_own(name)  # why: a planted lock is the planter's
            if refused:
                raise OSError(errno.EPERM, refused)
            hold.enter_context(locked(lock_path(name), lock_file=lock_path(name), shared=True,
                                      timeout=wait_s, mode=MODE, create=_create()))
        except LockTimeout:  # before OSError: a LockTimeout is a TimeoutError
            log.warning("a backup held %s's lock for %.0f s: working anyway", name, wait_s)
        except OSError as exc:  # never stop a wake for the backup's sake: say so, go on
            log.warning("no quiescent-point lock for %s (%s): a backup may catch this work "
                        "midway - run citizen onboard %s", name, exc, name)
        yield


@contextlib.contextmanager
def still(names: list[str], wait_s: float) -> Iterator[list[str]]:
    """Held (exclusive) by a backup over every citizen in `names`; yields those that
    were NOT quiet within `wait_s` (empty: a quiescent point) - the backup goes on."""
    create = _create()
    busy: list[str] = []
    refused = _untrusted()  # why: a planted lock says nothing of its daemon's work
    if refused:
        log.warning("%s: no daemon is held back", refused)
    with contextlib.ExitStack() as hold:
        pending = [] if refused else list(names)
        busy += sorted(names) if refused else []
        deadline = time.monotonic() + wait_s
        while pending:  # round by round: a daemon between wakes is caught in its gap
            for name in list(pending):
                slice_s = max(0.0, min(ROUND_S, deadline - time.monotonic()))
                try:
                    hold.enter_context(locked(lock_path(name), lock_file=lock_path(name),
                                              timeout=slice_s, mode=MODE, create=create))
                except LockTimeout:  # before OSError: a LockTimeout is a TimeoutError
                    continue
                except OSError as exc:  # missing, a link, a FIFO: never waited on
                    log.warning("no lock for %s (%s): its daemon is not held back", name, exc)
                    busy.append(name)
                pending.remove(name)
            if pending and time.monotonic() >= deadline:
                busy += sorted(pending)
                break
        yield busy
