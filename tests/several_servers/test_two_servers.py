"""Two servers of one civilization: each joined by `setup_server.sh --join`, its citizens
claimed in the database as its own; a citizen holds no database login; a server's role
writes only for its own citizens, whatever its code asks; and with one server powered
off the other goes on.

Booted once for the module (tests/lab.py): servers a and b under systemd-nspawn on a
private network, one PostgreSQL in the lab's namespace. The tests run in file order;
the last one powers b off. Needs root, systemd-nspawn and Debian's postgresql-15;
skipped with the reason elsewhere.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from citizen.broker.membership import BROKER_USER
from tests.installed_server import python_as
from tests.lab import DATABASE, PASSWORD_FILE, Lab, admin, fixture, unavailable
from tests.nspawn import PIP_ENV, SETUP, until
from tests.offline import PIP_OFFLINE

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

CITIZENS = {"a": ("opus", "aria"), "b": ("mira",)}
CONFIG, PASSFILE = "/etc/experience/civilization.json", "/etc/experience/pgpass"
lab = fixture(CITIZENS)


ADD = "INSERT INTO records (key, folder, author, data) VALUES (%s, 'changes', %s, '{}')"
REWRITE = "UPDATE records SET data = '{\"edited\": true}' WHERE key = %s AND author = %s"


def as_broker(lab: Lab, server: str, statement: str, key: str,
              author: str) -> subprocess.CompletedProcess[str]:
    """`statement` (key, author) as `server`'s broker user, through the broker's own pool
    and passfile; prints `done N` (rows) or the database's refusal (exit 3)."""
    code = (
        "import sys, psycopg\n"
        "from citizen.broker import database\n"
        "db = database.Database(database.settings(), max_size=1)\n"
        "try:\n"
        "    with db.connection() as conn:\n"
        "        cur = conn.execute(sys.argv[1], (sys.argv[2], sys.argv[3]))\n"
        "except psycopg.Error as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "    sys.exit(3)\n"
        "print('done', cur.rowcount)\n")
    return lab.release_python(server, BROKER_USER, "-c", code, statement, key, author)


def test_both_servers_joined_and_each_claimed_its_own_citizens(lab: Lab) -> None:
    where = {s["server"]: s for s in json.loads(admin(lab.admin_dsn, "status", "--json"))}
    assert {name: s["citizens"] for name, s in where.items()} == {
        "a": ["aria", "opus"], "b": ["mira"]}
    assert where["a"]["seen"] and where["b"]["seen"]  # each broker's role has spoken
    # A server's root asks through the server's own role: the same civilization.
    on_b = json.loads(lab.box("b").run("citizen", "civilization", "status", "--json").stdout)
    assert {s["server"]: s["citizens"] for s in on_b} == {"a": ["aria", "opus"], "b": ["mira"]}
    for name, server in lab.servers.items():
        assert f"changed: {CONFIG} (server {name})" in server.setup_output
        assert f"server {name}: {len(CITIZENS[name])} citizens claimed" in server.setup_output
        modes = server.run("stat", "-c", "%n %a %U:%G", CONFIG, PASSFILE)
        assert f"{CONFIG} 644 root:root" in modes
        assert f"{PASSFILE} 600 {BROKER_USER}:{BROKER_USER}" in modes
        config = json.loads(server.run("cat", CONFIG))
        assert config["server"] == name and "passfile=/etc/experience/pgpass" in config[
            "database"]
        seen = server.setup_output + server.run("cat", CONFIG) + server.run(
            "journalctl", "--no-pager", "-q")
        assert lab.passwords[name] not in seen  # the password: in the passfile only
        # The lab's network leads nowhere else: no default route, IPv4 or IPv6.
        for family in ("-4", "-6"):
            routes = subprocess.run(["nsenter", "-t", str(server.box.systemd_pid), "-n", "ip",
                                     family, "route"], capture_output=True, text=True,
                                    check=True).stdout
            assert "default" not in routes, routes


def test_a_citizen_reads_no_passfile_and_holds_no_login(lab: Lab) -> None:
    box = lab.box("a")
    read = box.run("runuser", "-u", "opus", "--", "cat", PASSFILE, check=False)
    assert read.returncode != 0 and "Permission denied" in read.stderr
    # civilization.json is everyone's to read (no secret in it): the string alone lets
    # no one in - as the server's role without its password, with a guess, or as admin.
    attempts = (
        "import json, psycopg\n"
        "from psycopg.conninfo import make_conninfo\n"
        "dsn = json.load(open('/etc/experience/civilization.json'))['database']\n"
        "for extra in ({}, {'password': 'guess'}, {'user': 'postgres'}):\n"
        "    try:\n"
        "        psycopg.connect(make_conninfo(dsn, **extra), connect_timeout=10).close()\n"
        "        print('CONNECTED', extra)\n"
        "    except psycopg.OperationalError as exc:\n"
        "        print('refused:', str(exc).strip().splitlines()[-1])\n")
    out = box.run(*python_as("opus"), attempts).stdout
    assert "CONNECTED" not in out, out
    lines = out.splitlines()
    assert "no password supplied" in lines[0]
    assert "password authentication failed" in lines[1]
    assert "no pg_hba.conf entry" in lines[2]  # the admin is no network login at all


def test_a_servers_role_writes_for_its_own_citizens_only(lab: Lab) -> None:
    own = as_broker(lab, "a", ADD, "changes/c1/proposal.json", "opus")
    assert own.stdout.strip() == "done 1", own.stdout + own.stderr
    forged = as_broker(lab, "a", ADD, "changes/c2/proposal.json", "mira")  # b's citizen
    assert forged.returncode == 3, forged.stdout + forged.stderr
    assert "InsufficientPrivilege" in forged.stdout and "row-level security" in forged.stdout
    theirs = as_broker(lab, "b", ADD, "changes/c3/proposal.json", "mira")
    assert theirs.stdout.strip() == "done 1", theirs.stdout + theirs.stderr
    # a's rewrite of mira's record: the policy hides her row from a's UPDATE.
    rewrite = as_broker(lab, "a", REWRITE, "changes/c3/proposal.json", "mira")
    assert rewrite.stdout.strip() == "done 0", rewrite.stdout + rewrite.stderr
    rows = lab.cluster.sql("SELECT key || ' ' || author || ' ' || data::text FROM records "
                           "ORDER BY key", DATABASE)
    assert rows.splitlines() == ["changes/c1/proposal.json opus {}",
                                 "changes/c3/proposal.json mira {}"]


def test_a_rerun_of_the_join_changes_nothing(lab: Lab) -> None:
    again = lab.box("b").run(SETUP, "--join", "b", "--database", lab.dsn("b"), "--password-file",
                             PASSWORD_FILE, *CITIZENS["b"], env={**PIP_ENV, **PIP_OFFLINE},
                             timeout=900).stdout
    # The join's own step (the rest is setup's, held by tests/server_install; a checkout
    # edited since the boot is a new release there).
    step = again.split("==> the civilization on several servers\n", 1)[1].split("==>", 1)[0]
    assert step == "    server b: 1 citizens claimed (mira)\n", again


def test_with_b_powered_off_a_goes_on(lab: Lab) -> None:
    b = lab.box("b")
    assert b.proc is not None
    b.run("systemctl", "poweroff", check=False)  # the way an operator powers it off
    until(lambda: b.proc is not None and b.proc.poll() is not None, timeout=120)
    a = lab.box("a")
    asked = a.run(*python_as("opus"), "import json; from citizen.access import client; "
                  "print(json.dumps(client.whoami('opus')))", check=False)
    assert asked.returncode == 0, asked.stderr  # a's broker answers its citizen
    written = as_broker(lab, "a", ADD, "changes/after-b/proposal.json", "opus")
    assert written.stdout.strip() == "done 1", written.stdout + written.stderr
    claimed = lab.release_python("a", BROKER_USER, "-m", "citizen.broker.membership", "claim")
    assert "server a: 2 citizens claimed" in claimed.stdout
    assert "changes/after-b/proposal.json" in lab.cluster.sql("SELECT key FROM records",
                                                              DATABASE)
