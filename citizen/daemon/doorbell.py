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
    """The doorbell directory's watch; `mode` is "inotify" or "polling (why)"."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.inotify: Any = None
        try:
            from inotify_simple import INotify, flags  # noqa: PLC0415 - optional: absent, we poll
        except ImportError:
            self.mode = "polling (inotify_simple is not installed)"
            return
        inotify = None
        try:
            inotify = INotify()
            inotify.add_watch(directory, flags.MOVED_TO | flags.CLOSE_WRITE)
        except OSError as exc:
            if inotify is not None:
                inotify.close()
            if exc.errno not in _NO_INOTIFY:
                raise
            self.mode = f"polling (inotify: {os.strerror(exc.errno)})"
            log.warning("doorbell: no inotify instance or watch for this user (%s); polling "
                        "%s once a second instead. Fine for hundreds of daemons; to watch "
                        "again, run fewer daemons as one user (a server gives each citizen "
                        "its own) or raise fs.inotify.max_user_instances",
                        os.strerror(exc.errno), directory)
            return
        self.inotify, self.mode = inotify, INOTIFY

    def wait(self) -> bool:
        """Block until a ring may have landed; True when the doorbell should be drained."""
        if self.inotify is not None:
            return bool(self.inotify.read())  # blocks until a file lands
        time.sleep(POLL_S)
        try:
            with os.scandir(self.directory) as entries:  # hidden: temp files, kept bad rings
                return any(not e.name.startswith(".") for e in entries)
        except OSError:
            return True  # let the drain meet (and report) whatever is wrong with it
