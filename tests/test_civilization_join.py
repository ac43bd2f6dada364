"""A server joins a civilization on several servers (citizen/broker/membership.py) and the
admin's commands (`citizen civilization`), against Debian's PostgreSQL (tests/postgres.py).
The booted two-server version is tests/several_servers/."""

from __future__ import annotations

import json
import os
import pwd
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from citizen.broker import database as civilization
from citizen.broker import membership
from citizen.broker.database import Database, Settings
from citizen.broker.membership import JoinError
from citizen.cli import cli
from tests.nspawn import until
from tests.postgres import Cluster

ME = pwd.getpwuid(os.getuid()).pw_name
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="join writes root's files")


def _admin(dsn: str, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["civilization", *args], env={"EXPERIENCE_ADMIN_DSN": dsn})
    assert result.exit_code == 0, result.output
    return result.output


@root_only
def test_join_writes_the_two_files_once_and_no_password_where_others_read(
        tmp_path: Path) -> None:
    secret = tmp_path / "a.pass"
    secret.write_text("s3cr:et\\x\n")
    dsn = "host=db.example dbname=experience user=experience_a"
    changed = membership.join("a", dsn, secret, tmp_path, user=ME)
    assert len(changed) == 2
    config = tmp_path / civilization.FILE
    assert oct(config.stat().st_mode & 0o777) == "0o644"
    assert oct((tmp_path / "pgpass").stat().st_mode & 0o777) == "0o600"
    assert "s3cr" not in config.read_text()
    got = civilization.settings(config)
    assert got is not None and got.server == "a"
    assert f"passfile={tmp_path / 'pgpass'}" in got.dsn
    # libpq's escapes: a ':' or '\' in the password is not a field's end.
    assert (tmp_path / "pgpass").read_text() == "*:*:*:experience_a:s3cr\\:et\\\\x\n"
    assert membership.join("a", dsn, secret, tmp_path, user=ME) == []  # a re-run: nothing
    (tmp_path / "pgpass").chmod(0o644)
    assert membership.join("a", dsn, secret, tmp_path, user=ME) == [
        f"{tmp_path / 'pgpass'} (the password of role experience_a, {ME}'s alone)"]


@pytest.mark.parametrize(("server", "dsn", "password", "says"), [
    ("A!", "host=h dbname=d user=u", "pw", "no server name"),
    ("a", "host=h dbname=d user=u password=pw", "pw", "holds a password"),
    ("a", "postgresql://u:pw@h/d", "pw", "holds a password"),
    ("a", "host=h dbname=d", "pw", "names no user - add user=…"),
    ("a", "host=h password", "pw", "cannot be read as a libpq connection string"),
    ("a", "host=h dbname=d user=u", "\n", "holds no password on one line"),
])
def test_join_refuses_what_cannot_work_and_names_the_fix(
        tmp_path: Path, server: str, dsn: str, password: str, says: str) -> None:
    secret = tmp_path / "pass"
    secret.write_text(password)
    with pytest.raises(JoinError, match=says) as caught:
        membership.join(server, dsn, secret, tmp_path, user=ME)
    assert "pw@" not in str(caught.value) and "password=pw" not in str(caught.value)
    assert not (tmp_path / civilization.FILE).exists()


def test_the_admin_installs_adds_servers_and_sees_who_lives_where(
        cluster: Cluster, database: str, tmp_path: Path) -> None:
    admin = cluster.dsn(database)
    assert "schema is in place" in _admin(admin, "install")
    role = cluster.role("srv")
    made = _admin(admin, "add-server", "a", "--role", role, "--password-file",
                  str(tmp_path / "a.pass"))
    assert "its password was made in" in made and "--join a" in made
    assert oct((tmp_path / "a.pass").stat().st_mode & 0o777) == "0o600"
    password = (tmp_path / "a.pass").read_text().strip()
    assert password not in made
    again = _admin(admin, "add-server", "a", "--role", role, "--password-file",
                   str(tmp_path / "a.pass"))
    assert "was made" not in again  # the file's password kept, set again
    (tmp_path / "a.pass").chmod(0o644)
    loose = CliRunner().invoke(cli, ["civilization", "add-server", "a", "--password-file",
                                     str(tmp_path / "a.pass")],
                               env={"EXPERIENCE_ADMIN_DSN": admin})
    assert loose.exit_code == 1 and "chmod 600" in loose.output

    db = Database(Settings("a", cluster.dsn(database, role)), max_size=1)
    try:
        claimed, refused = membership.announce(db, ["opus", "aria"])
    finally:
        db.close()
    assert (claimed, refused) == (["opus", "aria"], [])
    status = json.loads(_admin(admin, "status", "--json"))
    assert [(s["server"], s["citizens"], bool(s["seen"])) for s in status] == [
        ("a", ["aria", "opus"], True)]
    table = _admin(admin, "status")
    assert "2: aria, opus" in table and role in table
    _admin(admin, "add-server", "b", "--password-file", str(tmp_path / "b.pass"))
    assert "aria lives on server b" in _admin(admin, "move", "aria", "b")
    assert [(s["server"], s["citizens"]) for s in json.loads(_admin(admin, "status", "--json"))
            ] == [("a", ["opus"]), ("b", ["aria"])]
    nowhere = CliRunner().invoke(cli, ["civilization", "move", "aria", "zz"],
                                 env={"EXPERIENCE_ADMIN_DSN": admin})
    assert nowhere.exit_code == 1 and "no server zz" in nowhere.output


def test_the_heartbeat_claims_newcomers_and_outlives_a_silent_database(
        cluster: Cluster, database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    admin = cluster.dsn(database)
    civilization.install(admin)
    role = cluster.role("srv")
    civilization.add_server(admin, "a", role)
    db = Database(Settings("a", cluster.dsn(database, role)), max_size=1)
    monkeypatch.setattr(membership, "local_citizens", lambda: ["opus", "nova"])
    real_seen, failures = db.seen, [1]

    def seen() -> None:  # the database away once: the heartbeat logs it and goes on
        if failures:
            failures.pop()
            raise psycopg.OperationalError("the database is down")
        real_seen()

    monkeypatch.setattr(db, "seen", seen)
    stop = threading.Event()
    beat = threading.Thread(target=membership.heartbeat, args=(db, stop, {"opus"}, 0.05))
    beat.start()
    try:
        until(lambda: "nova" in cluster.sql("SELECT string_agg(name, ',') FROM citizens",
                                            database), timeout=30)
    finally:
        stop.set()
        beat.join()
        db.close()
    assert not failures
    assert cluster.sql("SELECT string_agg(name, ',') FROM citizens", database) == "nova"


def test_the_brokers_start_claims_its_citizens_even_after_a_failed_first_word(
        cluster: Cluster, database: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    admin = cluster.dsn(database)
    civilization.install(admin)
    role = cluster.role("srv")
    civilization.add_server(admin, "a", role)
    db = Database(Settings("a", cluster.dsn(database, role)), max_size=1)
    monkeypatch.setattr(membership, "local_citizens", lambda: ["opus"])
    real_seen = db.seen
    failures = [1]

    def seen() -> None:  # the start's word lost: logged, the heartbeat makes up for it
        if failures:
            failures.pop()
            raise psycopg.OperationalError("the database is down")
        real_seen()

    monkeypatch.setattr(db, "seen", seen)
    monkeypatch.setattr(membership, "SEEN_EVERY_S", 0.05)
    stop = threading.Event()
    beat = membership.on_start(db, stop)
    try:
        assert "did not hear server a at start" in caplog.text
        until(lambda: cluster.sql("SELECT seen IS NOT NULL FROM servers", database) == "t",
              timeout=30)
    finally:
        stop.set()
        beat.join()
        db.close()
    assert cluster.sql("SELECT string_agg(name || '@' || server, ',') FROM citizens",
                       database) == "opus@a"
