"""One ledger across servers (citizen.broker.spend): the caps hold while two servers race
calls against them, a server reserves and settles only for its own citizens, and a
broker killed with reservations open loses nothing - against Debian's PostgreSQL
(tests/postgres.py), with real processes for the race and the kill."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from click.testing import CliRunner

from citizen import config
from citizen.access import client
from citizen.access.commons import RINGS_VIEW, BrokerCommons
from citizen.broker import database as civilization
from citizen.broker import service, spend
from citizen.broker.database import Database, Settings
from citizen.broker.ledger import CIVILIZATION, CapExceeded, Caps, Ledger, LedgerUnavailable
from citizen.broker.spend import NotHere, SharedLedger
from citizen.cli.broker import spend as spend_command
from citizen.config import paths
from citizen.llm.base import Usage
from shared import clock
from tests.anthropic_server import MessagesServer, text
from tests.daemons import wait_for
from tests.postgres import Cluster

USD = 0.25  # a call's worst case: exact in binary, so N of them are exactly N * USD
ROOMY = Caps(1e6, 1e6, 1e6, 1e6)
SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: no pool, no thread inherited


@dataclass(frozen=True)
class Civ:
    """A civilization of two servers: a holds opus and aria, b holds mira and nova."""

    cluster: Cluster
    name: str  # the database
    roles: dict[str, str]

    def dsn(self, server: str) -> str:
        return self.cluster.dsn(self.name, self.roles[server])

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """As the admin (who sees and may do anything): the test's own eyes."""
        with psycopg.connect(self.cluster.dsn(self.name), autocommit=True) as conn:
            return conn.execute(sql.encode(), args).fetchall()

    def calls(self) -> list[tuple[Any, ...]]:
        return self.rows("SELECT id, server, citizen, state, reserved_usd, cost_usd "
                         "FROM calls ORDER BY id")

    def spend(self) -> dict[tuple[str, str], Decimal]:
        return {(c, p): u for c, p, u in self.rows("SELECT citizen, period, used FROM spend")}

    def unaccounted(self) -> list[tuple[Any, ...]]:
        """Every spend row whose `used` is not what its calls count (an open call its
        reservation, a closed one its cost; a refused one $0): none, if nothing leaked."""
        return self.rows("""
            SELECT * FROM (SELECT s.citizen, s.period, s.used, (SELECT COALESCE(sum(CASE
                WHEN c.state = 'reserved' THEN c.reserved_usd ELSE c.cost_usd END), 0)
                FROM calls c WHERE s.citizen IN ('*', c.citizen)
                AND s.period IN (c.day, c.month)) AS counted FROM spend s) t
            WHERE used <> counted""")


@pytest.fixture
def civ_db(cluster: Cluster, database: str) -> Civ:
    admin = cluster.dsn(database)
    civilization.install(admin)
    roles = {s: cluster.role(f"srv_{s}") for s in "ab"}
    for s, role in roles.items():
        civilization.add_server(admin, s, role)
    for citizen, s in (("opus", "a"), ("aria", "a"), ("mira", "b"), ("nova", "b")):
        civilization.move_citizen(admin, citizen, s)
    return Civ(cluster, database, roles)


@contextmanager
def server_db(civ: Civ, server: str, size: int = 2) -> Iterator[Database]:
    """A broker's pool as server `server` (its own role)."""
    db = Database(Settings(server, civ.dsn(server)), max_size=size)
    try:
        yield db
    finally:
        db.close()


# ---------------------------------------------------------------- two servers racing

THREADS, TRIES, FITS = 4, 25, 60  # each server: 4 threads x 25 calls; the cap fits 60


def _racer(dsn: str, server: str, citizens: list[str], cap: float, *, ready: Event,
           go: Event, out: Queue[tuple[str, int, int]]) -> None:
    """One server's broker: THREADS callers reserving as fast as they can."""
    db = Database(Settings(server, dsn), max_size=THREADS)
    ledger = SharedLedger(db)
    counts = {"reserved": 0, "refused": 0}
    lock = threading.Lock()

    def caller(i: int) -> None:
        go.wait()
        for k in range(TRIES):
            try:
                ledger.reserve(citizens[(i + k) % len(citizens)], "m", USD,
                               Caps(1e6, 1e6, cap, 1e6))
                outcome = "reserved"
            except CapExceeded:
                outcome = "refused"
            with lock:
                counts[outcome] += 1

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    ready.set()
    for t in threads:
        t.join()
    db.close()
    out.put((server, counts["reserved"], counts["refused"]))


def test_the_civilizations_daily_cap_holds_while_two_servers_race(civ_db: Civ) -> None:
    """Two brokers (two processes, two roles) race 200 calls against a cap that fits 60:
    exactly 60 are reserved. The naive check-then-update crosses it: see
    test_a_check_then_update_in_two_statements_crosses_the_cap."""
    cap = FITS * USD
    out: Queue[tuple[str, int, int]] = SPAWN.Queue()
    go = SPAWN.Event()
    racers = []
    for server, citizens in (("a", ["opus", "aria"]), ("b", ["mira", "nova"])):
        ready = SPAWN.Event()
        p = SPAWN.Process(target=_racer, args=(civ_db.dsn(server), server, citizens, cap),
                          kwargs={"ready": ready, "go": go, "out": out})
        p.start()
        racers.append((p, ready))
    assert all(ready.wait(60) for _, ready in racers), "a racer did not start"
    go.set()  # both servers' eight callers at once
    got = [out.get(timeout=120) for _ in racers]
    for p, _ in racers:
        p.join(30)
    assert [p.exitcode for p, _ in racers] == [0, 0]
    assert sum(r for _, r, _ in got) == FITS, got
    assert sum(r + f for _, r, f in got) == 2 * THREADS * TRIES
    states = civ_db.rows("SELECT state, count(*), sum(reserved_usd), sum(cost_usd) FROM calls "
                         "GROUP BY state ORDER BY state")
    assert states == [("refused", 2 * THREADS * TRIES - FITS,
                       Decimal(repr(USD)) * (2 * THREADS * TRIES - FITS), 0),
                      ("reserved", FITS, Decimal(repr(cap)), None)]
    assert civ_db.spend()[(CIVILIZATION, clock.today().isoformat())] == Decimal(repr(cap))
    assert civ_db.unaccounted() == []


class OneConnection:
    """A Database stand-in whose statements all run on `conn`: in a transaction the test
    holds open, so it decides when a racing server's reservation commits."""

    def __init__(self, conn: psycopg.Connection[Any], server: str) -> None:
        self.conn, self.server = conn, server

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        yield self.conn


class CheckThenUpdate(SharedLedger):
    """The naive reservation: read the civilization's total, decide, then raise it - two
    statements, each its own transaction, at the same READ COMMITTED."""

    def reserve(self, citizen: str, model: str, usd: float, caps: Caps,
                purpose: str = "") -> int:
        day = clock.today().isoformat()
        used = self._run(lambda conn: conn.execute(
            "SELECT used FROM spend WHERE citizen = '*' AND period = %s", (day,)).fetchone()[0])
        if float(used) + usd > caps.civilization_day:
            raise CapExceeded("the civilization's daily cap")
        self._run(lambda conn: conn.execute(
            "UPDATE spend SET used = used + %s WHERE citizen IN (%s, '*') AND period IN (%s, %s)",
            (Decimal(repr(usd)), citizen, day, day[:7])))
        return int(self._run(lambda conn: conn.execute(
            "INSERT INTO calls (citizen, day, month, ts, model, reserved_usd, state) "
            "VALUES (%s, %s, %s, %s, %s, %s, 'reserved') RETURNING id",
            (citizen, day, day[:7], clock.now(), model, Decimal(repr(usd)))).fetchone()[0]))


def _interleave(civ: Civ, kind: type[SharedLedger]) -> tuple[str, Decimal]:
    """a's reservation of the last room under the cap stays uncommitted while b's, made
    now, runs; then a commits. What b got, and the civilization's total after."""
    caps = Caps(1e6, 1e6, 1.0, 1e6)
    day = clock.today().isoformat()
    with server_db(civ, "b") as db_b, psycopg.connect(civ.dsn("a")) as conn:
        first = SharedLedger(db_b)  # the day's rows made, $0.75 of the $1.00 spent
        first.settle(first.reserve("mira", "m", 0.75, caps), 0.75, Usage(), 200)
        with server_db(civ, "a") as db_a:  # opus's rows made
            a = SharedLedger(db_a)
            a.release(a.reserve("opus", "m", 0.0, ROOMY), 0)
        racing_b = kind(db_b)
        racing_a = kind(cast(Database, OneConnection(conn, "a")))
        conn.commit()  # its start (recovery) is behind it
        racing_a.reserve("opus", "m", USD, caps)  # a's statements ran; its transaction is open
        outcome: list[str] = []

        def other() -> None:
            try:
                racing_b.reserve("mira", "m", USD, caps)
                outcome.append("reserved")
            except CapExceeded as exc:
                outcome.append(str(exc))

        thread = threading.Thread(target=other)
        thread.start()
        wait_for(lambda: civ.rows(  # b's reservation waits for a's lock
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND usename = %s "
            "AND wait_event_type = 'Lock'", (civ.name, civ.roles["b"]))[0][0] == 1)
        conn.commit()
        thread.join(30)
    return outcome[0], civ.spend()[(CIVILIZATION, day)]


def test_a_reservation_racing_an_uncommitted_one_waits_and_sees_it(civ_db: Civ) -> None:
    outcome, total = _interleave(civ_db, SharedLedger)
    assert "the civilization's daily cap" in outcome  # b was refused: a took the last room
    assert total == Decimal("1.00")


def test_a_check_then_update_in_two_statements_crosses_the_cap(civ_db: Civ) -> None:
    """The attack the one statement stops: the same interleaving lets both servers in."""
    outcome, total = _interleave(civ_db, CheckThenUpdate)
    assert outcome == "reserved"
    assert total == Decimal("1.25")  # over the $1.00 cap


# ---------------------------------------------------------------- whose rows a server writes

def test_a_server_reserves_and_settles_only_for_its_own_citizens(civ_db: Civ) -> None:
    with server_db(civ_db, "a") as db_a, server_db(civ_db, "b") as db_b:
        a, b = SharedLedger(db_a), SharedLedger(db_b)
        with pytest.raises(NotHere, match="mira does not live on this server") as refused:
            a.reserve("mira", "m", USD, ROOMY)  # b's citizen, before b made her rows
        assert isinstance(refused.value.__cause__, psycopg.errors.InsufficientPrivilege)
        held = b.reserve("mira", "m", USD, ROOMY)
        with pytest.raises(NotHere):
            a.reserve("mira", "m", USD, ROOMY)  # and after
        before = (civ_db.calls(), civ_db.spend())
        a.settle(held, 0.0, Usage(), 200)  # b's open call, closed through a's role
        a.release(held, 500)
        assert (civ_db.calls(), civ_db.spend()) == before  # invisible to a: nothing moved
        # What a's broker could send whatever its code: the database refuses it too.
        day = clock.today().isoformat()
        with db_a.connection() as conn:
            assert conn.execute("UPDATE calls SET state = 'released', cost_usd = 0 "
                                "WHERE id = %s", (held,)).rowcount == 0
            assert conn.execute("UPDATE spend SET used = 0 WHERE citizen = 'mira'").rowcount == 0
            for forged in ("a", "b"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("INSERT INTO calls (server, citizen, day, month, ts, model, "
                                 "reserved_usd, state) VALUES (%s, 'mira', %s, %s, '', 'm', 0, "
                                 "'released')", (forged, day, day[:7]))
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("DELETE FROM calls")
        assert (civ_db.calls(), civ_db.spend()) == before
        b.settle(held, 0.1, Usage(), 200)  # its own server closes it
    assert [r[3] for r in civ_db.calls()] == ["settled"]
    assert civ_db.unaccounted() == []


# ---------------------------------------------------------------- kill -9, then the database

def _holder(dsn: str, out: Queue[list[int]]) -> None:
    """Server a's broker: five calls of opus - one settled, one released, one charged its
    reservation, two left open - then one refused; it waits to be killed."""
    ledger = SharedLedger(Database(Settings("a", dsn), max_size=1))
    ids = [ledger.reserve("opus", "m", USD, ROOMY, purpose="kept open") for _ in range(5)]
    ledger.settle(ids[0], 0.125, Usage(input_tokens=10, output_tokens=5), 200)
    ledger.release(ids[1], 529)
    ledger.charge_reserved(ids[2], 502)
    try:
        ledger.reserve("opus", "m", 1.0, Caps(1.0, 1e6, 1e6, 1e6))
    except CapExceeded:
        out.put(ids)
    threading.Event().wait()  # holds its reservations until SIGKILL


def test_a_killed_broker_and_a_restarted_database_lose_nothing(civ_db: Civ) -> None:
    with server_db(civ_db, "b") as db_b:
        b = SharedLedger(db_b)
        b_open = [b.reserve("mira", "m", USD, ROOMY) for _ in range(3)]
        b.settle(b.reserve("nova", "m", USD, ROOMY), 0.2, Usage(), 200)
        out: Queue[list[int]] = SPAWN.Queue()
        holder = SPAWN.Process(target=_holder, args=(civ_db.dsn("a"), out))
        holder.start()
        a_ids = out.get(timeout=60)
        calls, spend = civ_db.calls(), civ_db.spend()
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
        civ_db.cluster.restart()  # immediate: as a crash, no checkpoint
        with server_db(civ_db, "a") as db_a:
            assert SharedLedger(db_a).orphaned == 2
        # a's two open calls now count at their worst case; nothing else changed.
        worst = {a_ids[3], a_ids[4]}
        assert civ_db.calls() == [(i, s, c, "orphaned", r, r) if i in worst else
                                  (i, s, c, st, r, cost) for i, s, c, st, r, cost in calls]
        assert civ_db.spend() == spend
        assert civ_db.unaccounted() == []
        assert [i for i, s, _, st, _, _ in civ_db.calls() if st == "reserved"] == b_open
        # b's broker goes on through the restart (its pool's connections died with it).
        for call in b_open:
            b.settle(call, 0.05, Usage(), 200)
    assert [r for r in civ_db.calls() if r[3] == "reserved"] == []
    assert civ_db.unaccounted() == []
    day = clock.today().isoformat()
    assert civ_db.spend()[(CIVILIZATION, day)] == Decimal("0.125") + 3 * Decimal("0.05") \
        + Decimal("0.2") + 3 * Decimal(repr(USD))  # settled, settled, charged and orphaned


# ---------------------------------------------------------------- the SQLite ledger's interface

def test_refusals_and_totals_are_the_sqlite_ledgers(civ_db: Civ, tmp_path: Path) -> None:
    """The same calls through both ledgers: the same refusals, word for word, and the
    same totals at every step; a call closed twice moves nothing the second time."""
    tight = {"citizen_day": Caps(0.3, 1e6, 1e6, 1e6), "citizen_month": Caps(1e6, 0.3, 1e6, 1e6),
             "civilization_day": Caps(1e6, 1e6, 0.3, 1e6),
             "civilization_month": Caps(1e6, 1e6, 1e6, 0.3)}
    with server_db(civ_db, "a") as db:
        shared, local = SharedLedger(db), Ledger(tmp_path / "ledger.db")
        try:
            for ledger in (shared, local):
                first = ledger.reserve("opus", "m", USD, ROOMY)
                ledger.settle(first, 0.2, Usage(input_tokens=3), 200)
                ledger.settle(first, 5.0, Usage(), 200)  # a second close: nothing moves
                ledger.release(first, 500)
                ledger.charge_reserved(ledger.reserve("aria", "m", USD, ROOMY), 502)
                ledger.release(ledger.reserve("aria", "m", 0.5, ROOMY), 529)
                ledger.reserve("opus", "m", 0.0625, ROOMY)  # left open: counts as reserved
            assert [s.spent(who, d) for s in (shared, local) for d in (None, "1999-01-01")
                    for who in ("opus", "aria", CIVILIZATION, "nova")] == pytest.approx(
                2 * [0.2625, 0.25, 0.5125, 0.0, 0.0, 0.0, 0.0, 0.0], abs=1e-12)
            names = {"citizen_day": "opus's daily cap (budget.max_usd_per_day)",
                     "citizen_month": "opus's monthly cap (budget.max_usd_per_month)",
                     "civilization_day": "the civilization's daily cap "
                                         "(civilization_usd_per_day in broker.json)",
                     "civilization_month": "the civilization's monthly cap "
                                           "(civilization_usd_per_month in broker.json)"}
            for cap, caps in tight.items():
                said = []
                for ledger in (shared, local):
                    with pytest.raises(CapExceeded) as refused:
                        ledger.reserve("opus", "m", 0.5, caps)
                    said.append(str(refused.value))
                assert said[0] == said[1] and names[cap] in said[0], said
        finally:
            local.close()
    kept = civ_db.rows("SELECT reserved_usd, cost_usd FROM calls WHERE state = 'refused'")
    assert kept == 4 * [(Decimal("0.5"), Decimal(0))]  # kept at $0, as ledger.py does
    assert civ_db.unaccounted() == []


# ---------------------------------------------------------------- which ledger the broker keeps

def test_without_civilization_json_the_broker_keeps_its_sqlite_ledger(
        rules_dir: Path, tmp_path: Path) -> None:
    ledger, db = service.open_ledger(tmp_path)  # rules_dir: no civilization.json in it
    ledger.close()
    assert type(ledger) is Ledger and db is None and (tmp_path / "ledger.db").exists()


def test_a_model_call_through_the_broker_lands_in_the_civilizations_ledger(
        civ_db: Civ, rules_dir: Path, civ: Path, messages_api: MessagesServer) -> None:
    """The broker `citizen` starts (dev mode) reads civilization.json: its call is a row
    of server a in the shared ledger (service.open_ledger), and no SQLite ledger is made."""
    # Here, not at the top: the racers' spawned processes import this module, and
    # test_broker's imports the model SDK (≈2 s each).
    from tests.test_broker import ask, setup_opus

    (rules_dir / civilization.FILE).write_text(json.dumps(
        {"server": "a", "database": civ_db.dsn("a")}))
    setup_opus(civ, messages_api.url)
    messages_api.reply(text("hello", input_tokens=120, output_tokens=30))
    assert ask().text == "hello"
    price = config.templates().prices["claude-opus-4-6"]
    ((server, citizen, state, reserved, cost),) = civ_db.rows(
        "SELECT server, citizen, state, reserved_usd, cost_usd FROM calls")
    assert (server, citizen, state) == ("a", "opus", "settled")
    assert float(cost) == pytest.approx((120 * price.input + 30 * price.output) / 1e6)
    assert reserved >= cost
    assert civ_db.spend()[("opus", clock.today().isoformat())] == cost
    assert not service.ledger_path().exists()
    assert client.civilization_spent("mira") == pytest.approx(float(cost), abs=1e-6)
    # The same broker process serves the commons (service imports its routes) and hears
    # rings for the citizens whose homes are here (service.hear_rings): its scheduler's
    # long poll gets opus's ring, and not mira's (she lives on server b).
    opus = BrokerCommons(paths.broker_socket(), "opus")
    opus.create("debates/d9/thread.json", {"topic": "t"})
    assert civ_db.rows("SELECT author FROM records WHERE key = 'debates/d9/thread.json'") \
        == [("opus",)]
    assert client.view(RINGS_VIEW, {"wait": 0})[0] == 200  # listening before the rings
    opus.ring("mira", "debate", "not here")
    opus.ring("opus", "debate", "d9")
    status, answer = client.view(RINGS_VIEW, {"wait": 20}, timeout_s=30)
    assert status == 200 and [(r["citizen"], r["reason"]) for r in answer["rings"]] == [
        ("opus", "d9")]


def test_with_the_database_down_no_call_goes_out_unrecorded(civ_db: Civ) -> None:
    """The database stopped: a reservation is refused as unreachable (the broker answers
    503, the call is not forwarded) - never a call forwarded without its row."""
    with server_db(civ_db, "a") as db:
        ledger = SharedLedger(db)
        ledger.reserve("opus", "m", USD, ROOMY)
        civ_db.cluster.stop("immediate")
        try:
            db.pool.timeout = 2.0  # the pool's wait for a connection, shortened for the test
            with pytest.raises(LedgerUnavailable, match="cannot be reached"):
                ledger.reserve("opus", "m", USD, ROOMY)
        finally:
            civ_db.cluster.start()
        assert len(civ_db.calls()) == 1 and civ_db.unaccounted() == []


def test_citizen_spend_and_the_refused_view_read_every_servers_calls(
        civ_db: Civ, rules_dir: Path, tmp_path: Path) -> None:
    """With civilization.json, `citizen spend` and the dashboard's refused view read the
    civilization's ledger (spend.calls_since, spend.refused_per_day): both servers'
    calls, not this server's empty SQLite file."""
    with server_db(civ_db, "a") as db_a, server_db(civ_db, "b") as db_b:
        a, b = SharedLedger(db_a), SharedLedger(db_b)
        a.settle(a.reserve("opus", "m", USD, ROOMY), 0.01, Usage(input_tokens=10), 200)
        b.settle(b.reserve("mira", "m", USD, ROOMY), 0.02, Usage(input_tokens=10), 200)
        with pytest.raises(CapExceeded):
            b.reserve("mira", "m", 5.0, Caps(1.0, 1e6, 1e6, 1e6))
    (rules_dir / civilization.FILE).write_text(json.dumps(
        {"server": "a", "database": civ_db.dsn("a")}))
    day = clock.today().isoformat()
    got = CliRunner().invoke(spend_command, ["--json"])
    assert got.exit_code == 0, got.output
    assert {(r["citizen"], r["usd"]) for r in json.loads(got.output)} == {
        ("opus", 0.01), ("mira", 0.02)}
    assert spend.refused_per_day(tmp_path, day, 10) == (
        [{"day": day, "citizen": "mira", "refused": 1, "usd": 5.0}], False)
    civ_db.cluster.stop("immediate")
    try:
        failed = CliRunner().invoke(spend_command, [])
        assert failed.exit_code != 0 and "cannot be read" in failed.output
    finally:
        civ_db.cluster.start()


def test_a_broker_started_while_the_database_is_down_goes_on_and_recovers_first(
        civ_db: Civ, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database down at the broker's start: the ledger opens (the broker serves what
    needs no database), calls are refused until it is back, and a killed broker's open
    reservation is orphaned before the first new one - never the new one itself."""
    with server_db(civ_db, "a") as db:
        left_open = SharedLedger(db).reserve("opus", "m", USD, ROOMY)  # then "killed"
    monkeypatch.setattr(civilization, "START_WAIT_S", 1.0)
    civ_db.cluster.stop("immediate")
    try:
        with server_db(civ_db, "a") as db:
            db.pool.timeout = 2.0
            ledger = SharedLedger(db)  # no exception: the broker starts
            assert ledger.orphaned == 0
            with pytest.raises(LedgerUnavailable):
                ledger.reserve("opus", "m", USD, ROOMY)
            civ_db.cluster.start()
            db.pool.check()
            new = ledger.reserve("opus", "m", USD, ROOMY)
            assert ledger.orphaned == 1
            states = {i: st for i, _, _, st, _, _ in civ_db.calls()}
            assert states == {left_open: "orphaned", new: "reserved"}
    finally:
        if not (civ_db.cluster.data / "postmaster.pid").exists():  # failed while down
            civ_db.cluster.start()
