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
from concurrent.futures import ThreadPoolExecutor

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


DEBATE = """
import json, sys
from citizen import civilization
from shared.errors import SharedError
me, did, side = sys.argv[1], sys.argv[2], sys.argv[3]
debates = civilization.debates()
if did == "new":
    did = debates.start("Should every change ship with its tests?", ["opus", "mira", "aria"],
                        me).id
d = debates.load(did)
assert d.owed_by() == me, d.owed_by()
d = debates.move(did, me, {"move": "TOP_CLAIM", "content": me + " says " + side,
                           "top_claim": {"statement": "Tests first keeps the code safe",
                                         "side": side, "confidence": 0.7}})
print(json.dumps({"id": did, "seq": d.seq, "next": d.owed_by()}))
"""
FORGE = """
import json
from citizen.access.commons import BrokerCommons
from citizen.config import paths
from shared.remote import RemoteRefused
try:  # the header names mira; the kernel says opus
    BrokerCommons(paths.broker_socket(), "mira").create("debates/x/moves/0001-mira.json", {})
    print("WRITTEN")
except RemoteRefused as exc:
    print(exc.status, exc)
"""


def test_a_debate_runs_with_its_citizens_on_both_servers(lab: Lab) -> None:
    """Real citizens, each through its own server's broker: opus (a) opens and moves,
    mira (b) moves next, aria (a) after her; each row's author is the kernel's word on
    its server. And opus, naming mira in the broker's header, is refused by a's broker."""
    a, b = lab.box("a"), lab.box("b")
    first = json.loads(a.run(*python_as("opus"), DEBATE, "opus", "new", "YES").stdout)
    assert (first["seq"], first["next"]) == (1, "mira")
    second = json.loads(b.run(*python_as("mira"), DEBATE, "mira", first["id"], "NO").stdout)
    assert (second["seq"], second["next"]) == (2, "aria")
    third = json.loads(a.run(*python_as("aria"), DEBATE, "aria", first["id"], "NO").stdout)
    assert third["seq"] == 3
    moves = lab.cluster.sql("SELECT key || ' ' || author FROM records WHERE folder LIKE "
                            "'debates/%/moves' ORDER BY key", DATABASE)  # the one debate
    assert [line.split("/")[-1] for line in moves.splitlines()] == [
        "0001-opus.json opus", "0002-mira.json mira", "0003-aria.json aria"]
    forged = a.run(*python_as("opus"), FORGE).stdout
    assert forged.startswith("403") and "cannot call for mira" in forged, forged
    # Who rings whom is the scheduler's to hear, not a citizen's (the rings view).
    peek = a.run(*python_as("opus"), "from citizen.access import client; from citizen."
                 "access.commons import RINGS_VIEW; print(client.view(RINGS_VIEW, "
                 "{'wait': 0})[0])").stdout
    assert peek.strip() == "403", peek


SPEND = """
import sys
from citizen.broker import database
from citizen.broker.ledger import CapExceeded, Caps
from citizen.broker.spend import SharedLedger
who, n, cap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
db = database.Database(database.settings(), max_size=2)
ledger, made = SharedLedger(db), 0
for _ in range(n):
    try:
        ledger.reserve(who, "claude-haiku-4-5", 0.25, Caps(1e6, 1e6, cap, 1e6))
        made += 1
    except CapExceeded:
        pass
print(made)
"""
# The spend rows whose total is not what their calls count (an open call its reservation,
# a closed one its cost): none, if nothing leaked.
UNACCOUNTED = (
    "SELECT count(*) FROM spend s WHERE s.used <> (SELECT coalesce(sum(CASE WHEN "
    "c.state = 'reserved' THEN c.reserved_usd ELSE c.cost_usd END), 0) FROM calls c "
    "WHERE s.citizen IN ('*', c.citizen) AND s.period IN (c.day, c.month))")


def test_the_civilizations_cap_holds_under_calls_raced_from_both_servers(lab: Lab) -> None:
    """Each server's broker user reserves 40 calls of $0.25 as fast as it can, both at
    once, against a civilization's daily cap that fits 30 (whatever was spent before):
    exactly 30 reserved in all, and the totals are the calls."""
    before = float(lab.cluster.sql("SELECT coalesce(max(used), 0) FROM spend WHERE "
                                   "citizen = '*' AND period = to_char(now() at time zone "
                                   "'utc', 'YYYY-MM-DD')", DATABASE) or 0)
    cap = str(before + 7.5)
    with ThreadPoolExecutor(2) as pool:
        made = list(pool.map(lambda job: lab.release_python(
            job[0], BROKER_USER, "-c", SPEND, job[1], "40", cap), [("a", "opus"),
                                                                 ("b", "mira")]))
    counts = [int(m.stdout.strip() or -1) for m in made]
    assert sum(counts) == 30 and all(c > 0 for c in counts), [m.stderr for m in made]
    assert lab.cluster.sql(UNACCOUNTED, DATABASE) == "0"


def test_a_killed_broker_and_a_restarted_database_lose_nothing(lab: Lab) -> None:
    """a's broker holds open reservations when it is killed (-9), then the database
    restarts as from a crash: a's broker, started again by systemd, counts them at
    their worst case; no reservation stays open and b's rows are untouched."""
    # 2 reservations as a's broker user, never settled: what a broker killed mid-call leaves
    held = lab.release_python("a", BROKER_USER, "-c", SPEND, "aria", "2", "1e6")
    assert held.stdout.strip() == "2", held.stderr
    a = lab.box("a")
    pid = a.run("systemctl", "show", "-p", "MainPID", "--value", "experience-broker").stdout
    a.run("kill", "-9", pid.strip())
    lab.cluster.restart()
    a.run("systemctl", "restart", "experience-broker")
    until(lambda: lab.cluster.sql("SELECT count(*) FROM calls WHERE server = 'a' AND state "
                                  "= 'reserved'", DATABASE) == "0", timeout=120)
    orphaned = lab.cluster.sql("SELECT count(*) FROM calls WHERE citizen = 'aria' AND "
                               "state = 'orphaned' AND cost_usd = reserved_usd", DATABASE)
    assert orphaned == "2"
    assert lab.cluster.sql(UNACCOUNTED, DATABASE) == "0"


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
