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
import logging
import os
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


def prepare(name: str, uid: int, gid: int) -> list[str]:
    """Root, at onboarding: the citizen's lock file, its own (0600) in root's directory."""
    made = []
    directory = lock_dir()
    if not directory.is_dir():
        directory.mkdir(mode=0o755, parents=True)  # root's: no citizen adds or swaps a lock
        made.append(str(directory))
    path = lock_path(name)
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
    with contextlib.ExitStack() as hold:
        pending = list(names)
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
