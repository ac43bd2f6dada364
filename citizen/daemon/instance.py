"""One daemon per citizen: its single-instance lock, `~/.daemon.lock`.

A flock (the one lock, tried once): the kernel drops it when the daemon dies, so a
stale lock never blocks a restart. 0600: a flock needs only a descriptor, any
descriptor, so a lock a peer can open (0640 did: group `citizens` may read the home) is
one it can hold - a peer's `flock -s ~victim/.daemon.lock sleep inf` made the victim's
daemon and every wake unit fail AlreadyRunning for ever, and its start guard roll the
code back. A lock file held only by other users' processes (opened while it was
readable, before an upgrade made it 0600) is replaced: they keep a descriptor of a
file nobody locks any more.
"""

from __future__ import annotations

import contextlib
import logging
import os

from citizen.admin.modes import DAEMON_LOCK_MODE
from citizen.config.paths import Home
from citizen.errors import CitizenError
from shared.errors import LockTimeout
from shared.locks import holders, locked

log = logging.getLogger(__name__)


class AlreadyRunning(CitizenError, RuntimeError):
    """Another daemon holds this citizen's lock."""




def take(home: Home) -> contextlib.ExitStack:
    """Hold `home`'s daemon lock (its pid written in it); the caller closes the stack.

    :raises AlreadyRunning: a process of the citizen's own holds it.
    """
    try:
        hold = _take(home)
    except LockTimeout:
        if not _stolen(home):
            other = home.daemon_lock.read_text().strip() or "?"
            raise AlreadyRunning(
                f"citizen {home.name} already has a running daemon (pid {other}) - stop it "
                f"first (systemctl stop citizen@{home.name}, or kill {other})") from None
        hold = _take(home)  # a new file: no peer holds a descriptor of it
    home.daemon_lock.write_text(str(os.getpid()))
    return hold


def _take(home: Home) -> contextlib.ExitStack:
    hold = contextlib.ExitStack()
    hold.enter_context(locked(home.daemon_lock, lock_file=home.daemon_lock, timeout=0,
                              mode=DAEMON_LOCK_MODE))
    return hold


def _stolen(home: Home) -> bool:
    """Whether the lock is held by other users only; if so it is removed (said in the
    journal, naming who held it) for `_take` to make anew."""
    try:
        fd = os.open(home.daemon_lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        held = holders(fd)
    finally:
        os.close(fd)
    if not held or any(uid == os.geteuid() for _, uid in held):
        return False
    log.warning("%s was held by %s, not by %s's own processes: replaced by a new lock "
                "file (0600)", home.daemon_lock,
                ", ".join(f"pid {pid} (uid {uid})" for pid, uid in held), home.name)
    home.daemon_lock.unlink(missing_ok=True)
    return True
