"""How the daemon hears its doorbell: an inotify watch where the kernel gives one, else a
poll of the doorbell directory once a second.

inotify instances are counted per user (`fs.inotify.max_user_instances`, 128 by
default). On a server each citizen is its own user and has them to itself; in dev mode
every daemon is the same user, and the 129th daemon got EMFILE and died at start
(issue 33). A daemon that cannot have an instance now polls instead - one `scandir` of
an empty directory a second (≈ 10 µs; bench/daemons.py) - and says so in its heartbeat
and `citizen status`, so no daemon dies of a limit nobody raised.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

POLL_S = 1.0  # a ring is noticed within this (≈ 5 ms with inotify)
# The kernel's "no more inotify for you" answers: instances (EMFILE) or watches (ENOSPC)
# used up for this user, no file descriptors (EMFILE/ENFILE), no kernel memory.
_NO_INOTIFY = {errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.ENOMEM}
INOTIFY = "inotify"


class Watch:
    """The watch on one or more doorbell directories (a daemon's own, or every citizen's
    of a crowd: one inotify instance for all); `mode` is "inotify" or "polling (why)"."""

    def __init__(self, *directories: Path) -> None:
        self.directories = list(directories)
        self.inotify: Any = None
        self.watched: dict[int, Path] = {}  # inotify watch descriptor -> its directory
        try:
            from inotify_simple import INotify, flags  # noqa: PLC0415 - optional: absent, we poll
        except ImportError:
            self.mode = "polling (inotify_simple is not installed)"
            return
        inotify = None
        try:
            inotify = INotify()
            for directory in self.directories:
                wd = inotify.add_watch(directory, flags.MOVED_TO | flags.CLOSE_WRITE)
                self.watched[wd] = directory
        except OSError as exc:
            if inotify is not None:
                inotify.close()
            if exc.errno not in _NO_INOTIFY:
                raise
            self.watched = {}
            self.mode = f"polling (inotify: {os.strerror(exc.errno)})"
            log.warning("doorbell: no inotify instance or watch for this user (%s); polling "
                        "%d doorbell folder(s) once a second instead. Fine for hundreds of "
                        "daemons; to watch again, run fewer daemons as one user (`citizen "
                        "run --all` hosts every citizen in one) or raise "
                        "fs.inotify.max_user_instances", os.strerror(exc.errno),
                        len(self.directories))
            return
        self.inotify, self.mode = inotify, INOTIFY

    def wait(self) -> bool:
        """Block until a ring may have landed; True when the doorbell should be drained."""
        return bool(self.wait_any())

    def wait_any(self) -> list[Path]:
        """Block until a ring may have landed; the directories to drain."""
        if self.inotify is not None:
            events = self.inotify.read()  # blocks until a file lands
            if any(e.wd == -1 for e in events):  # the kernel's queue overflowed: look at all
                return list(self.directories)
            return sorted({self.watched[e.wd] for e in events if e.wd in self.watched})
        time.sleep(POLL_S)
        return [d for d in self.directories if _rung(d)]


def _rung(directory: Path) -> bool:
    try:
        with os.scandir(directory) as entries:  # hidden: temp files, kept bad rings
            return any(not e.name.startswith(".") for e in entries)
    except OSError:
        return True  # let the drain meet (and report) whatever is wrong with it
