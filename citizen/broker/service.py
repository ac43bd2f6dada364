"""Where the broker lives, and running it (`citizen broker run`).

Server: the socket is `/run/experience-broker/broker.sock` (systemd's RuntimeDirectory
for the broker's user), the ledger `/var/lib/experience-broker/ledger.db` (its
StateDirectory, 0700). Dev mode: both under `CIV_ROOT/.broker/`. The environment
variables EXPERIENCE_BROKER_SOCKET and EXPERIENCE_BROKER_STATE override either.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import citizen.broker.mail  # noqa: F401 - its routes
from citizen import config, paths
from citizen.broker import (
    onboarding,  # noqa: F401 - registers its routes
    repos,  # noqa: F401 - the shared repositories' routes
    world,  # noqa: F401 - the world's approved actions
)
from citizen.broker.ledger import Ledger
from citizen.broker.listener import idle_watch, listen
from citizen.broker.server import Broker
from citizen.notify import notify
from shared.locks import locked

log = logging.getLogger(__name__)
SOCKET_ENV, STATE_ENV = "EXPERIENCE_BROKER_SOCKET", "EXPERIENCE_BROKER_STATE"
SERVER_SOCKET = Path("/run/experience-broker/broker.sock")
SERVER_STATE = Path("/var/lib/experience-broker")
LEDGER = "ledger.db"


def state_dir() -> Path:
    override = os.environ.get(STATE_ENV)
    if override:
        return Path(override)
    return SERVER_STATE if config.server_mode() else paths.civ_root() / ".broker"


def socket_path() -> Path:
    override = os.environ.get(SOCKET_ENV)
    if override:
        return Path(override)
    return SERVER_SOCKET if config.server_mode() else paths.civ_root() / ".broker" / "broker.sock"


def ledger_path() -> Path:
    return state_dir() / LEDGER


def serve(idle_exit_s: float | None = None) -> None:
    """Run the broker in the foreground until stopped (or idle that long, in dev mode).

    :raises LockTimeout: another broker already serves this ledger.
    """
    state, sock = state_dir(), socket_path()
    # 0700: the ledger is the broker's alone (its user on a server, the developer's).
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    sock.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    # One broker per ledger: the lock is held for the broker's whole life; the kernel
    # drops it when the process dies, kill -9 included.
    with locked(state / LEDGER, timeout=0, mode=0o600):
        ledger = Ledger(state / LEDGER)
        if ledger.orphaned:
            log.warning("%d reservations of a broker that was killed count at their worst "
                        "case", ledger.orphaned)
        broker = Broker(ledger, server_mode=config.server_mode())
        server = listen(sock, broker, server_mode=broker.server_mode)
        stop = threading.Event()
        if idle_exit_s:
            threading.Thread(target=idle_watch, args=(server, idle_exit_s, stop, state),
                             daemon=True).start()
        log.info("broker listening on %s, ledger %s", sock, state / LEDGER)
        notify("READY=1")
        try:
            server.serve_forever(poll_interval=0.5)
        finally:
            stop.set()
            server.server_close()
            ledger.close()

