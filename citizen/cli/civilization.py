"""`citizen civilization install|add-server|status`: the admin's side of a civilization
on several servers (issue 46) - its database's schema, a role for each server, and who
lives where. A server's own side is `setup_server.sh --join` (citizen.broker.membership).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from citizen.broker import database, membership
from citizen.cli.options import json_option
from citizen.cli.terminal import age, table, wide_option
from citizen.errors import CitizenError

F = TypeVar("F", bound=Callable[..., Any])
ADMIN_ENV = "EXPERIENCE_ADMIN_DSN"


def admin_option(required: bool = True) -> Callable[[F], F]:
    """`--admin DSN` or $EXPERIENCE_ADMIN_DSN: the admin role's libpq string (never echoed)."""
    return click.option(
        "--admin", "admin_dsn", envvar=ADMIN_ENV, show_envvar=True, required=required,
        metavar="DSN", help="The database's admin role as a libpq string, e.g. 'host=/run/"
        "postgresql dbname=experience user=postgres'; its password in ~/.pgpass, never in "
        "the string (an option shows in ps: prefer the variable).")


def _database_error(exc: Exception, who: str) -> CitizenError:
    if who != "the admin":  # a server's own login: its passfile is root's and the broker's
        return CitizenError(f"the civilization's database refused {who}: {str(exc).strip()} "
                            "- run it as root (sudo), or give the admin's --admin DSN")
    return CitizenError(f"the civilization's database refused the admin: {str(exc).strip()} - "
                        f"check the connection string (--admin or ${ADMIN_ENV}), that the "
                        "database exists (createdb experience) and its pg_hba.conf")


@click.group()
def civilization() -> None:
    """One civilization on several servers: the database they share, and who lives where.

    \b
    The admin, once, where the database's admin role can log in:
      createdb experience
      export EXPERIENCE_ADMIN_DSN='host=/run/postgresql dbname=experience user=postgres'
      citizen civilization install
      citizen civilization add-server a --password-file a.pass
    Then on server a, with a.pass copied there (and removed after):
      sudo scripts/setup_server.sh --join a \\
          --database 'host=db.example dbname=experience user=experience_a' \\
          --password-file a.pass
    And on any server, or as the admin:
      citizen civilization status
    """


@civilization.command("install")
@admin_option()
def install(admin_dsn: str) -> None:
    """Make the civilization's tables, roles' rights and policies (again on an upgrade:
    it changes only what differs)."""
    import psycopg  # noqa: PLC0415 - only a civilization of several servers needs it

    try:
        database.install(admin_dsn)
    except psycopg.Error as exc:
        raise _database_error(exc, "the admin") from exc
    click.echo("the civilization's schema is in place; next: citizen civilization add-server "
               "NAME --password-file FILE for each server")


def _existing(path: Path) -> str:
    """The password in the admin's existing file `path`."""
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CitizenError(f"{path} may be read by others - chmod 600 {path}, or give a new "
                           "file name and a password is made there")
    # door: the admin's own password file, named on its command line (its mode checked above)
    password = path.read_text(encoding="utf-8").rstrip("\r\n")
    if not password or "\n" in password:
        raise CitizenError(f"{path} holds no password on one line - give a new file name "
                           "and a password is made there")
    return password


def _password(path: Path) -> tuple[str, bool]:
    """(the password in `path`, whether it was made now): a new random one written there
    (0600) when the file does not exist yet."""
    try:
        # 0600, made exclusively: the role's password is the admin's until copied to its server.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return _existing(path), False
    password = secrets.token_urlsafe(32)  # no ':' or '\\': a passfile line as it is
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(password + "\n")
    return password, True


@civilization.command("add-server")
@click.argument("name")
@click.option("--role", default=None, help="Its database role (default experience_NAME).")
@click.option("--password-file", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="The role's password: read if the file exists, else made "
              "and written there (0600). Copy it to the server for setup_server.sh --join.")
@admin_option()
def add_server(name: str, role: str | None, password_file: Path, admin_dsn: str) -> None:
    """Let server NAME in: a role of its own that writes only for its own citizens, with
    the password in --password-file (again: sets the password from the file)."""
    import psycopg  # noqa: PLC0415

    if not database.SERVER_RE.match(name):
        raise click.BadParameter("lowercase letters, digits and dashes, at most 32, starting "
                                 "with a letter", param_hint="NAME")
    role = role or f"experience_{name.replace('-', '_')}"
    password, made = _password(password_file)
    try:
        database.add_server(admin_dsn, name, role, password)
    except psycopg.Error as exc:
        raise _database_error(exc, "the admin") from exc
    click.echo(f"server {name} may log in as role {role}"
               + (f"; its password was made in {password_file}" if made else ""))
    click.echo(f"next, on server {name} (with {password_file} copied there, removed after):\n"
               f"  sudo scripts/setup_server.sh --join {name} --database "
               f"'host=<the database> dbname=<its name> user={role}' --password-file "
               f"{password_file.name}")


@civilization.command("status")
@admin_option(required=False)
@wide_option
@json_option
def status(admin_dsn: str | None, wide: bool, as_json: bool) -> None:
    """Every server, when its broker was last heard from, and its citizens (as the admin,
    or on a joined server as its broker's role)."""
    import psycopg  # noqa: PLC0415

    dsn, who = admin_dsn, "the admin"
    if dsn is None:
        config = database.settings()
        if config is None:
            raise CitizenError(f"this server joined no civilization ({database.FILE} is "
                               f"missing) - give the admin's --admin DSN or ${ADMIN_ENV}")
        dsn, who = config.dsn, f"server {config.server}"
    try:
        servers = membership.roster(dsn)
    except psycopg.Error as exc:
        raise _database_error(exc, who) from exc
    if as_json:
        click.echo(json.dumps(servers, indent=2))
        return
    table(["SERVER", "ROLE", "LAST SEEN", "CITIZENS"],
          [[s["server"], s["role"], age(s["seen"]) if s["seen"] else "never",
            f"{len(s['citizens'])}: {', '.join(s['citizens'])}" if s["citizens"] else "0"]
           for s in servers],
          wide=wide, empty="no servers yet - add one with `citizen civilization add-server`")


@civilization.command("move")
@click.argument("citizen")
@click.argument("server")
@admin_option()
def move(citizen: str, server: str, admin_dsn: str) -> None:
    """Say that CITIZEN now lives on SERVER (after its backup was restored there): from
    now on only SERVER's broker may write its rows. Its records stay its own."""
    import psycopg  # noqa: PLC0415

    try:
        database.move_citizen(admin_dsn, citizen, server)
    except psycopg.errors.ForeignKeyViolation as exc:
        raise CitizenError(f"no server {server} - `citizen civilization status` lists "
                           "them") from exc
    except psycopg.Error as exc:
        raise _database_error(exc, "the admin") from exc
    click.echo(f"{citizen} lives on server {server}; remove it from its old server "
               "(scripts/remove_citizen.sh) once it runs on the new one")
