"""A server's membership of a civilization on several servers (issue 46): joining it,
and its broker's word that its citizens live here.

- `join` (root, run by `setup_server.sh --join`): from the admin's name for this server,
  its role's connection string and a file holding the role's password, writes the
  operator's `civilization.json` (root's, 0644: no secret in it) and libpq's passfile
  `pgpass` (the broker's user's, 0600), so the broker's user can log in and no citizen can.
- `announce` (the broker at start, and setup after a join): claims each of this server's
  citizens in the database and says the server is alive; `heartbeat` keeps saying so and
  claims a citizen onboarded since.
- `roster`: every server, when its broker was last heard from, and its citizens
  (`citizen civilization status`).

`python -m citizen.broker.membership join|claim` is what scripts/setup_server.sh runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pwd
import stat
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from citizen import civilization
from citizen.broker import database
from citizen.broker.database import ClaimedElsewhere, Database, Settings
from citizen.config import paths
from citizen.errors import CitizenError
from shared.atomic import write_bytes

log = logging.getLogger(__name__)
BROKER_USER = "experience-broker"  # the broker's system user (scripts/setup_server.sh)
PASSFILE = "pgpass"  # libpq's password file, in the operator's directory
SEEN_EVERY_S = 60.0  # how often a broker says it is alive (status shows a silent server)
CONNECT_TIMEOUT_S = 10  # a join or status against a database that does not answer
ROSTER = """
SELECT s.name, s.role, s.joined, s.seen,
       coalesce(array_agg(c.name ORDER BY c.name) FILTER (WHERE c.name IS NOT NULL), '{}')
FROM servers s LEFT JOIN citizens c ON c.server = s.name
GROUP BY s.name ORDER BY s.name
"""


class JoinError(CitizenError, ValueError):
    """A join that cannot work as asked; the message says what to change."""


def _field(value: str) -> str:
    """One field of a libpq passfile line: `\\` and `:` escaped (libpq's rule)."""
    return value.replace("\\", "\\\\").replace(":", "\\:")


def connection_string(dsn: str, passfile: Path) -> tuple[str, str]:
    """(`dsn` naming `passfile` for its password, the role it logs in as).

    :raises JoinError: it is no connection string, holds a password, or lacks a part.
    """
    import psycopg  # noqa: PLC0415 - only a civilization of several servers needs it
    from psycopg import conninfo  # noqa: PLC0415

    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        # Not quoted back: a malformed string may carry a password.
        raise JoinError("--database cannot be read as a libpq connection string - write it "
                        "as 'host=db.example dbname=experience user=experience_a'") from exc
    if "password" in params:
        raise JoinError("--database holds a password - remove it and give the password in "
                        "--password-file: civilization.json, which keeps the connection "
                        "string, is readable by every user")
    missing = [key for key in ("host", "dbname", "user") if not params.get(key)]
    if missing:
        raise JoinError(f"--database names no {' or '.join(missing)} - add "
                        + " ".join(f"{key}=…" for key in missing))
    params["passfile"] = str(passfile)
    return conninfo.make_conninfo("", **params), str(params["user"])


def read_password(path: Path) -> str:
    """The one line of `path` (one trailing newline allowed).

    :raises JoinError: it cannot be read or holds no password on one line.
    """
    try:
        raw = path.read_text(encoding="utf-8")  # door: root's copy of the admin's password file
    except (OSError, UnicodeDecodeError) as exc:
        raise JoinError(f"{path} cannot be read ({exc}) - copy the file that `citizen "
                        "civilization add-server` wrote to this server and name it") from exc
    password = raw.rstrip("\r\n")
    if not password or "\n" in password or "\r" in password:
        raise JoinError(f"{path} holds no password on one line - give the file that `citizen "
                        "civilization add-server` wrote")
    return password


def _differs(path: Path, data: bytes, mode: int, owner: tuple[int, int]) -> bool:
    """Whether `path` is not already a plain file holding `data` with `mode` and `owner`."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if (not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != mode
            or (st.st_uid, st.st_gid) != owner):
        return True
    return path.read_bytes() != data  # door: /etc/experience, root's (a regular file, above)


def join(server: str, dsn: str, password_file: Path, folder: Path | None = None,
         user: str = BROKER_USER) -> list[str]:
    """Make this machine the server `server` of the civilization `dsn` names: its
    civilization.json and the passfile of `user` (the broker's), written when they
    differ; what changed.

    :raises JoinError: the arguments cannot make a working join (the message says how).
    """
    if not database.SERVER_RE.match(server):
        raise JoinError(f"--join {server!r} is no server name - lowercase letters, digits and "
                        "dashes, at most 32, starting with a letter (as given to `citizen "
                        "civilization add-server`)")
    folder = folder or paths.operator_dir()
    passfile = folder / PASSFILE
    dsn, role = connection_string(dsn, passfile)
    password = read_password(password_file)
    try:
        broker = pwd.getpwnam(user)
    except KeyError as exc:
        raise JoinError(f"there is no user {user} - run scripts/setup_server.sh, which makes "
                        "it") from exc
    changed = []
    config = folder / database.FILE
    data = (json.dumps({"server": server, "database": dsn}, indent=2) + "\n").encode()
    # 0644 root: no secret in it (the password is in the passfile), every user may read
    # which server this is; only root changes it, as every operator's file.
    if _differs(config, data, 0o644, (0, 0)):
        write_bytes(config, data, 0o644, (0, 0))
        changed.append(f"{config} (server {server})")
    line = f"*:*:*:{_field(role)}:{_field(password)}\n".encode()
    owner = (broker.pw_uid, broker.pw_gid)
    # 0600 the broker's user's: the role's password is its alone - no citizen may log in
    # as the server - and libpq ignores a passfile that group or others may read.
    if _differs(passfile, line, 0o600, owner):
        write_bytes(passfile, line, 0o600, owner)
        changed.append(f"{passfile} (the password of role {role}, {user}'s alone)")
    return changed


def local_citizens() -> list[str]:
    """This server's citizens as its broker can tell: their Unix users (it cannot read
    inside the homes)."""
    return [name for name in civilization.citizen_users() if paths.NAME_RE.match(name)]


def announce(db: Database, names: Iterable[str]) -> tuple[list[str], list[str]]:
    """Claim each citizen of `names` for this server and say the server is alive:
    (the names now this server's, why each other one is not)."""
    claimed, refused = [], []
    for name in names:
        try:
            db.claim(name)
        except ClaimedElsewhere as exc:
            refused.append(str(exc))
            continue
        claimed.append(name)
    db.seen()
    return claimed, refused


def on_start(db: Database, stop: threading.Event) -> threading.Thread:
    """What the broker does once its pool is open: claim this server's citizens, say it
    is alive, and keep saying so (and claiming newcomers) until `stop` is set. A database
    that fails here is logged: the heartbeat claims them all on its next beat."""
    import psycopg  # noqa: PLC0415 - as in heartbeat

    try:
        claimed, refused = announce(db, local_citizens())
    except psycopg.Error as exc:
        log.warning("the civilization's database did not hear server %s at start: %s",
                    db.server, exc)
        claimed, refused = [], []
    log.info("server %s: %d citizens claimed in the civilization's database", db.server,
             len(claimed))
    for why in refused:
        log.warning("%s", why)
    beat = threading.Thread(target=heartbeat, args=(db, stop, set(claimed), SEEN_EVERY_S),
                            name="civilization-seen", daemon=True)
    beat.start()
    return beat


def heartbeat(db: Database, stop: threading.Event, known: set[str],
              every_s: float = SEEN_EVERY_S) -> None:
    """Every `every_s` until `stop`: claim the citizens onboarded since and say this
    server is alive. A database that does not answer is logged and tried again: this
    server's citizens go on without it (DEPLOY.md, several servers)."""
    import psycopg  # noqa: PLC0415 - the pool's errors, PoolTimeout included, are its

    while not stop.wait(every_s):
        try:
            new = [name for name in local_citizens() if name not in known]
            claimed, refused = announce(db, new)
        except psycopg.Error as exc:
            log.warning("the civilization's database did not hear server %s: %s", db.server,
                        exc)
            continue
        known.update(claimed)
        for why in refused:
            log.warning("%s", why)


def roster(dsn: str) -> list[dict[str, Any]]:
    """Every server of the civilization: its role, when it joined and was last heard
    from (None: never), and its citizens."""
    import psycopg  # noqa: PLC0415

    with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        rows = conn.execute(ROSTER).fetchall()
    return [{"server": name, "role": role, "joined": joined.isoformat(),
             "seen": seen.isoformat() if seen else None, "citizens": list(citizens)}
            for name, role, joined, seen, citizens in rows]


def claim_here(config: Settings) -> tuple[list[str], list[str]]:
    """As the broker's user: check the login, then `announce` every local citizen.

    :raises JoinError: the database cannot be reached or refuses the login.
    """
    import psycopg  # noqa: PLC0415

    try:  # one plain connection first: its error names the cause (the pool's only times out)
        psycopg.connect(config.dsn, connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg.Error as exc:
        raise JoinError(f"server {config.server} cannot log in to the civilization's "
                        f"database: {str(exc).strip()} - check the connection string in "
                        f"{paths.operator_dir() / database.FILE}, the password (setup_server.sh "
                        "--join ... --password-file) and the database's pg_hba.conf") from exc
    db = Database(config, max_size=1)
    try:
        return announce(db, local_citizens())
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    """`join SERVER DSN PASSWORD_FILE` as root, `claim` as the broker's user."""
    parser = argparse.ArgumentParser(prog="python -m citizen.broker.membership")
    sub = parser.add_subparsers(dest="what", required=True)
    joining = sub.add_parser("join", help="write civilization.json and the passfile (root)")
    joining.add_argument("server")
    joining.add_argument("database")
    joining.add_argument("password_file", type=Path)
    sub.add_parser("claim", help="claim this server's citizens (the broker's user)")
    args = parser.parse_args(argv)
    try:
        if args.what == "join":
            for what in join(args.server, args.database, args.password_file):
                print(f"changed: {what}")
            return 0
        config = database.settings()
        if config is None:
            raise JoinError(f"{paths.operator_dir() / database.FILE} is missing - this server "
                            "has joined no civilization (setup_server.sh --join)")
        claimed, refused = claim_here(config)
    except CitizenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"server {config.server}: {len(claimed)} citizens claimed"
          + (f" ({', '.join(claimed)})" if claimed else ""))
    for why in refused:
        print(f"refused: {why}", file=sys.stderr)
    return 3 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
