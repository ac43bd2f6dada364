"""Running the broker (`citizen broker run`): its routes, its ledger, its socket.

Where the socket and the state live is `citizen.config.paths` (`broker_socket`,
`broker_state`): the citizen's side needs them too. The ledger is this server's SQLite
file, or - when the operator's `civilization.json` names the civilization's database
(several servers) - the one ledger every server shares (citizen.broker.spend).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import cast

import citizen.broker.mail  # noqa: F401 - its routes
from citizen import config
from citizen.access import client
from citizen.broker import (
    commons,  # noqa: F401 - the commons' routes, when civilization.json names a database
    database,
    mailnews,  # noqa: F401 - the scheduler's new-mail numbers
    membership,
    onboarding,  # noqa: F401 - registers its routes
    repos,  # noqa: F401 - the shared repositories' routes
    reviews,  # its route: the draw of a change's reviewers; its owes_review: below
    views,  # noqa: F401 - the dashboard's read-only views
    world,  # noqa: F401 - the world's approved actions
)
from citizen.broker.ledger import FILE, Ledger
from citizen.broker.listener import idle_watch, listen
from citizen.broker.rings import Listener, Rings
from citizen.broker.server import Broker
from citizen.broker.spend import SharedLedger, Spending
from citizen.config import paths
from citizen.daemon.notify import notify
from shared.locks import locked

log = logging.getLogger(__name__)
LEDGER = FILE  # the ledger's name in the state directory (citizen.broker.ledger)


def ledger_path() -> Path:
    return paths.broker_state() / LEDGER


def open_ledger(state: Path) -> tuple[Spending, database.Database | None]:
    """The broker's ledger, and the civilization's database when it has one: the shared
    ledger if the operator's civilization.json names a database, else this server's
    SQLite file in `state`, exactly as a server on its own has always kept it.

    :raises ConfigError: civilization.json is not valid (the message names the key).
    """
    settings = database.settings()
    if settings is None:
        return Ledger(state / LEDGER), None
    db = database.Database(settings)
    try:
        return SharedLedger(db), db
    except BaseException:
        db.close()
        raise


def hear_rings(broker: Broker) -> Listener | None:
    """On one of several servers, the one LISTEN that hears rings for this server's
    citizens (citizen.broker.rings), kept for the scheduler in `broker.rings`."""
    if broker.database is None:
        return None
    broker.rings = Rings()
    listener = Listener(broker.database.dsn, broker.database.lives_here, broker.rings)
    listener.start()
    return listener


def serve(idle_exit_s: float | None = None) -> None:
    """Run the broker in the foreground until stopped (or idle that long, in dev mode).

    :raises LockTimeout: another broker already serves this ledger.
    """
    state, sock = paths.broker_state(), paths.broker_socket()
    # 0700: the ledger is the broker's alone (its user on a server, the developer's).
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    sock.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    # One broker per ledger: the lock is held for the broker's whole life; the kernel
    # drops it when the process dies, kill -9 included.
    with locked(state / LEDGER, timeout=0, mode=0o600):
        ledger, db = open_ledger(state)
        if ledger.orphaned:
            log.warning("%d reservations of a broker that was killed count at their worst "
                        "case", ledger.orphaned)
        # cast: Broker.ledger is annotated Ledger, and both ledgers have its interface
        # (spend.Spending, checked by mypy in spend.py); widening the annotation waits
        # for tests/test_broker_views.py's _seed to take a Spending. One pool: the
        # ledger's database is the commons' (Broker.database).
        broker = Broker(cast(Ledger, ledger), server_mode=config.server_mode(), database=db)
        broker.permits.first = reviews.owes_review  # a drawn reviewer's wake goes first
        listener = hear_rings(broker)
        if not broker.server_mode:  # what it follows, for ensure() to compare (dev mode)
            client.record_start(state)
        server = listen(sock, broker, server_mode=broker.server_mode)
        stop = threading.Event()
        if db is not None:  # its citizens claimed as this server's, and "alive" each minute
            membership.on_start(db, stop)
        if idle_exit_s:
            threading.Thread(target=idle_watch, args=(server, idle_exit_s, stop, state),
                             daemon=True).start()
        log.info("broker listening on %s, ledger %s", sock, state / LEDGER if db is None
                 else f"in the civilization's database (server {db.server})")
        notify("READY=1")
        try:
            server.serve_forever(poll_interval=0.5)
        finally:
            stop.set()
            server.server_close()
            ledger.close()
            if listener is not None:
                listener.close()
            if db is not None:
                db.close()

