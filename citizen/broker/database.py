"""The database a civilization on several servers shares (docs/architecture.md §6).

Named by the operator's `civilization.json` (beside broker.json); without it the server
is a civilization of its own and nothing here is used (the file backend, as always):

    {"server": "a",                                   # this server's name in the database
     "database": "host=db.example port=5432 dbname=experience user=experience_a
                  passfile=/etc/experience/pgpass sslmode=verify-full"}

The connection string is libpq's own; its password lives in the passfile named there
(libpq refuses one that group or others may read), readable by the broker's user alone,
so no password is in a file a citizen or a log could show.

One `Database` per broker holds one pool (psycopg_pool): every citizen of the server
shares its few connections, never one per citizen. What a server's role may write is
the schema's (`sql/civilization.sql`), enforced by the database itself.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from citizen.config import paths
from citizen.errors import ConfigError

__all__ = ["ClaimedElsewhere", "ConfigError", "Database", "Settings", "add_server", "install",
           "move_citizen", "schema", "settings"]

FILE = "civilization.json"  # its name in the operator's directory (paths.civilization_file)
SCHEMA = "civilization.sql"  # in citizen/broker/sql/, applied by the admin (install)
log = logging.getLogger(__name__)
SERVER_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
# A few connections serve a server's thousand citizens: a model call's reservation or a
# record's write holds one for a millisecond or two, and the listener holds its own.
POOL_MIN, POOL_MAX = 1, 8
START_WAIT_S = 10.0  # the broker's start waits this long for a first connection


@dataclass(frozen=True)
class Settings:
    """This server's place in a civilization of several."""

    server: str
    dsn: str

    def __repr__(self) -> str:  # the connection string may name a password file
        return f"Settings(server={self.server!r})"


def settings(path: Path | None = None) -> Settings | None:
    """The operator's `civilization.json`, or None: one server on its own.

    :raises ConfigError: it exists and is not valid (the message names the key).
    """
    path = path or paths.civilization_file()
    if not path.is_file():
        return None
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))  # door: /etc/experience
    except (OSError, ValueError) as exc:
        raise ConfigError(path, "", f"cannot be read as JSON ({exc})",
                          'write {"server": "<name>", "database": "<libpq string>"}') from exc
    if not isinstance(data, dict):
        raise ConfigError(path, "", "is not a JSON object", '{"server": …, "database": …}')
    server, dsn = data.get("server"), data.get("database")
    if not isinstance(server, str) or not SERVER_RE.match(server):
        raise ConfigError(path, "server", f"{server!r} is no server name",
                          "a lowercase name of at most 32 letters, digits and dashes")
    if not isinstance(dsn, str) or not dsn.strip():
        raise ConfigError(path, "database", "is missing",
                          "a libpq connection string: host=… dbname=… user=… passfile=…")
    return Settings(server, dsn)


def schema() -> str:
    """The civilization's schema, as shipped with the release (a data file)."""
    # door: the release's own data file (root's), never a citizen's
    return resources.files("citizen.broker").joinpath("sql", SCHEMA).read_text("utf-8")


def install(admin_dsn: str) -> None:
    """Make (or bring up to date) the civilization's tables, as the admin role."""
    import psycopg  # noqa: PLC0415 - only a civilization of several servers needs it

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        # One session at a time applies it: two servers joining at once would race on
        # CREATE TABLE IF NOT EXISTS (a unique violation in the catalogue).
        conn.execute("SELECT pg_advisory_lock(hashtextextended('experience schema', 0))")
        conn.execute(schema().encode())
        conn.execute("SELECT pg_advisory_unlock(hashtextextended('experience schema', 0))")


def add_server(admin_dsn: str, name: str, role: str, password: str | None = None) -> None:
    """Let `role` in as the server `name` (made if missing; a member of
    experience_server, so it may do what the schema grants and nothing else)."""
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    if not SERVER_RE.match(name):
        raise ValueError(f"{name!r} is no server name: lowercase letters, digits, dashes")
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE experience_server")
                         .format(sql.Identifier(role)))
        if password is not None:
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)))
        # A server that dies holding a document's row (citizen.broker.holds) must not keep
        # it locked until TCP notices (hours): its idle transaction ends after 30 s.
        conn.execute(sql.SQL("ALTER ROLE {} SET idle_in_transaction_session_timeout = "
                             "'30s'").format(sql.Identifier(role)))
        conn.execute("INSERT INTO servers (name, role) VALUES (%s, %s) "
                     "ON CONFLICT (name) DO UPDATE SET role = EXCLUDED.role", (name, role))


def move_citizen(admin_dsn: str, citizen: str, server: str) -> None:
    """Assign `citizen` to `server` (a restore on another server; the admin's alone)."""
    import psycopg  # noqa: PLC0415

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO citizens (name, server) VALUES (%s, %s) "
                     "ON CONFLICT (name) DO UPDATE SET server = EXCLUDED.server",
                     (citizen, server))


class ClaimedElsewhere(Exception):
    """A citizen's name is another server's."""


class Database:
    """A broker's pool of connections to the civilization's database."""

    def __init__(self, config: Settings, *, max_size: int = POOL_MAX) -> None:
        from psycopg_pool import ConnectionPool, PoolTimeout  # noqa: PLC0415

        self.server = config.server
        self.dsn = config.dsn  # the rings' LISTEN connection is its own (citizen.broker.rings)
        self.pool = ConnectionPool(config.dsn, min_size=POOL_MIN, max_size=max_size,
                                   open=True, kwargs={"autocommit": True},
                                   name=f"experience-{config.server}")
        # A database down at the broker's start is said, not fatal: the pool keeps
        # trying, and what needs no database (wake permits, mail, this server's own
        # commons) goes on; model calls and shared steps are refused (503) meanwhile.
        # (Not pool.wait: it closes the pool when it times out.)
        try:
            with self.pool.connection(timeout=START_WAIT_S):
                pass
        except PoolTimeout:
            log.warning("the civilization's database does not answer (server %s); the "
                        "broker goes on and keeps trying - model calls wait for it",
                        config.server)

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled connection in autocommit; `with conn.transaction():` for more."""
        with self.pool.connection() as conn:
            yield conn

    def claim(self, citizen: str) -> None:
        """Register `citizen` as living on this server (idempotent).

        :raises ClaimedElsewhere: another server holds the name.
        """
        with self.connection() as conn:
            row = conn.execute("SELECT claim_citizen(%s)", (citizen,)).fetchone()
        if row is None or row[0] != self.server:
            raise ClaimedElsewhere(f"{citizen} lives on server {row[0] if row else '?'}, "
                                   f"not {self.server}: move it there with a backup and "
                                   "restore (DEPLOY.md, several servers)")

    def lives_here(self, citizen: str) -> bool:
        """Whether the database has `citizen` on this server (one query: rings are few)."""
        with self.connection() as conn:
            row = conn.execute("SELECT server FROM citizens WHERE name = %s",
                               (citizen,)).fetchone()
        return row is not None and row[0] == self.server

    def seen(self) -> None:
        """This server's broker is alive."""
        with self.connection() as conn:
            conn.execute("SELECT server_seen()")
