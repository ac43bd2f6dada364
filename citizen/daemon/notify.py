"""sd_notify for systemd's Type=notify and watchdog; a no-op when not run by systemd."""

from __future__ import annotations

import os
import socket

# Set by the daemon in the environment of each wake process it starts, so the wake
# can bind its life to the daemon's (see `citizen wake`).
DAEMON_PID_ENV = "CITIZEN_DAEMON_PID"


def notify(message: str) -> bool:
    """Send `READY=1`, `STATUS=…`, `WATCHDOG=1` or `STOPPING=1` to systemd, if it listens."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract socket namespace
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode())
        except OSError:
            return False
    return True


def watchdog_interval() -> float | None:
    """Seconds between watchdog pings (half of WatchdogSec), when systemd asks for them."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and int(pid) != os.getpid()):
        return None
    return int(usec) / 2_000_000
