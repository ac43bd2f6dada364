"""Run a command on a pseudo-terminal, as a person's shell would: what progress bars and
heartbeats draw only there (scripts/lib/progress.sh, citizen/cli/progress.py)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence

DEADLINE_S = 300.0  # a hung command fails its test, never hangs it


def on_a_terminal(argv: Sequence[str], env: Mapping[str, str] | None = None,
                  columns: int | None = None) -> tuple[int, str]:
    """Run `argv` with stdout and stderr on a new pseudo-terminal (`columns` wide if
    given); its exit code and everything it drew, escapes included."""
    main, side = pty.openpty()
    if columns is not None:  # the terminal's own size, as `stty size` reports it
        fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(list(argv), env=None if env is None else dict(env),
                            stdin=subprocess.DEVNULL, stdout=side, stderr=side, close_fds=True)
    os.close(side)
    out = b""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    if proc.poll() is None:
        proc.kill()
    return proc.wait(), out.decode(errors="replace")
