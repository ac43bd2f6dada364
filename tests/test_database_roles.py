"""The civilization's database holds authorship itself (citizen/broker/sql/civilization.sql):
a server's role writes rows only for the citizens assigned to it - whatever its broker's
code does - and deletes nothing. Against Debian's PostgreSQL (tests/postgres.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from citizen.broker import database as civilization
from citizen.broker.database import ClaimedElsewhere, Database, Settings
from citizen.errors import ConfigError
from tests.postgres import Cluster


@pytest.fixture
def two_servers(cluster: Cluster, database: str) -> Iterator[tuple[Database, Database, str]]:
    """Servers a and b on one database, each with its role; a holds opus, b holds mira."""
    admin = cluster.dsn(database)
    civilization.install(admin)
    roles = {s: cluster.role(f"srv_{s}") for s in "ab"}
    for s, role in roles.items():
        civilization.add_server(admin, s, role)
    a = Database(Settings("a", cluster.dsn(database, roles["a"])), max_size=2)
    b = Database(Settings("b", cluster.dsn(database, roles["b"])), max_size=2)
    a.claim("opus")
    b.claim("mira")
    try:
        yield a, b, admin
    finally:
        a.close()
        b.close()


def _add(db: Database, key: str, author: str) -> None:
    with db.connection() as conn:
        conn.execute("INSERT INTO records (key, folder, author, data) VALUES (%s, %s, %s, %s)",
                     (key, key.rsplit("/", 1)[0], author, json.dumps({"author": author})))


def test_a_server_role_writes_records_only_for_its_own_citizens(
        two_servers: tuple[Database, Database, str]) -> None:
    a, b, _ = two_servers
    _add(a, "changes/c1/proposal.json", "opus")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        _add(a, "changes/c2/proposal.json", "mira")  # b's citizen, through a's role
    _add(b, "changes/c3/proposal.json", "mira")
    with pytest.raises(psycopg.errors.InsufficientPrivilege), a.connection() as conn:
        cur = conn.execute("UPDATE records SET author = 'opus' WHERE key = %s",
                           ("changes/c3/proposal.json",))
        assert cur.rowcount == 0  # mira's row is invisible to a's UPDATE ...
        conn.execute("UPDATE records SET author = 'mira' WHERE key = %s",
                     ("changes/c1/proposal.json",))  # ... and opus's cannot become mira's
    with a.connection() as conn:
        rows = conn.execute("SELECT key, author FROM records ORDER BY key").fetchall()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM records")
    assert rows == [("changes/c1/proposal.json", "opus"), ("changes/c3/proposal.json", "mira")]


def test_a_server_cannot_claim_or_move_another_servers_citizen(
        two_servers: tuple[Database, Database, str]) -> None:
    a, _b, admin = two_servers
    with pytest.raises(ClaimedElsewhere, match="lives on server b"):
        a.claim("mira")
    with a.connection() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("UPDATE citizens SET server = 'a' WHERE name = 'mira'")
    with a.connection() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("INSERT INTO servers (name, role) VALUES ('c', current_user)")
    civilization.move_citizen(admin, "mira", "a")  # the admin's restore on a: now a's
    _add(a, "changes/c4/proposal.json", "mira")


def test_the_schema_applies_twice_and_settings_are_checked(
        cluster: Cluster, database: str, tmp_path: Path) -> None:
    civilization.install(cluster.dsn(database))
    civilization.install(cluster.dsn(database))  # an upgrade re-applies it
    assert cluster.sql("SELECT count(*) FROM servers", database) == "0"
    path = tmp_path / "civilization.json"
    assert civilization.settings(path) is None
    path.write_text(json.dumps({"server": "A!", "database": "host=x"}))
    with pytest.raises(ConfigError, match="no server name"):
        civilization.settings(path)
    path.write_text(json.dumps({"server": "a", "database": "host=x passfile=/p"}))
    got = civilization.settings(path)
    assert got == Settings("a", "host=x passfile=/p") and "passfile" not in repr(got)


def test_a_servers_idle_transaction_ends_on_its_own(
        cluster: Cluster, database: str) -> None:
    """A server that dies holding a document's row (its broker's transaction left open)
    frees it after 30 s, not when TCP notices: the role's own setting."""
    admin = cluster.dsn(database)
    civilization.install(admin)
    role = cluster.role("srv_c")
    civilization.add_server(admin, "c", role)
    with psycopg.connect(cluster.dsn(database, role)) as conn:
        got = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
    assert got == ("30s",)
