"""Two servers' brokers on one civilization database (tests/postgres.py's cluster), each
serving on its own socket with its own database role: the fixture `sites` for the
several-servers tests that need no booted servers (tests/test_commons_database.py,
tests/test_debates_several_servers.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from citizen.access.commons import BrokerCommons
from citizen.admin import founding
from citizen.broker import commons as _routes  # noqa: F401 - registers the commons' routes
from citizen.broker import database as civ
from citizen.broker.database import Database, Settings
from citizen.broker.ledger import Ledger
from citizen.broker.listener import Server, listen
from citizen.broker.server import Broker
from tests.postgres import Cluster

SERVERS = {"a": ["opus", "aria"], "b": ["mira"]}  # who lives where


@dataclass
class Site:
    """One server: its broker, on its socket, with its role's pool."""

    broker: Broker
    socket: Path
    server: Server
    thread: threading.Thread
    dsn: str

    def as_citizen(self, name: str) -> BrokerCommons:
        return BrokerCommons(self.socket, name)


@pytest.fixture
def sites(cluster: Cluster, database: str, tmp_path: Path) -> Iterator[dict[str, Site]]:
    """Servers a (opus, aria) and b (mira), each broker serving in a thread (dev mode: the
    test's one user names the citizen; the kernel's word is tests/several_servers')."""
    admin = cluster.dsn(database)
    founding.init([c for cs in SERVERS.values() for c in cs])
    civ.install(admin)
    out: dict[str, Site] = {}
    try:
        for name, citizens in SERVERS.items():
            role = cluster.role(f"srv_{name}")
            civ.add_server(admin, name, role)
            dsn = cluster.dsn(database, role)
            db = Database(Settings(name, dsn), max_size=4)
            for c in citizens:
                db.claim(c)
            b = Broker(Ledger(tmp_path / f"ledger-{name}.db"), server_mode=False, database=db)
            sock = tmp_path / f"broker-{name}.sock"
            srv = listen(sock, b, server_mode=False)
            thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
            thread.start()
            out[name] = Site(b, sock, srv, thread, dsn)
        yield out
    finally:
        for site in out.values():
            site.server.shutdown()
            site.thread.join(10)
            site.server.server_close()
            site.broker.ledger.close()
            if site.broker.database is not None:
                site.broker.database.close()
