"""Daily caps: per citizen and per civilization, checked before every call; the call
that would cross is not made, a task waits for tomorrow instead of failing, the
operators hear once at 80 %, and every call is in the day's ledger.

The attack on the old code: nothing capped a day - only a single wake was capped, so
doorbell wakes (a debate, a proposal, a mailed task) could spend without limit."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from citizen import config
from citizen.config import ModelPrice, paths
from citizen.home import spend, wakelog
from citizen.home.tasks import TaskQueue
from citizen.wake.flow import run_wake
from shared import door
from tests.anthropic_server import MessagesServer
from tests.scripts import Actor, call, provides

OPUS_PRICE = ModelPrice(5.0, 25.0, 6.25, 0.5)


def spent_already(name: str, usd: float) -> None:
    spend.record(paths.home(name), wake=0, purpose="earlier", tier="primary", model="m",
                 tokens_in=0, tokens_out=0, cache_read=0, cache_write=0, cost_usd=usd)


def caps(name: str, citizen: float, civilization: float = 1000.0) -> None:
    cfg = paths.home(name).config
    data = json.loads(cfg.read_text())
    data["budget"] = {**data.get("budget", {}), "max_usd_per_day": citizen,
                      "civilization_usd_per_day": civilization}
    cfg.write_text(json.dumps(data))


def test_the_boundary_call_is_allowed_and_the_next_cent_is_not(civ: Path) -> None:
    caps("opus", 1.0)
    spent_already("opus", 0.5)
    cfg = config.load_citizen("opus")
    daily = spend.Daily(paths.home("opus"), cfg.budget.max_usd_per_day,
                        cfg.budget.civilization_usd_per_day)
    daily.check(0.5)  # exactly at the cap: allowed
    with pytest.raises(spend.DailyCapReached, match=r"\$1.00 daily cap.*00:00 UTC"):
        daily.check(0.5 + 1e-6)


def test_at_the_cap_a_wake_with_work_claims_nothing_and_calls_nothing(civ: Path) -> None:
    caps("opus", 2.0)
    spent_already("opus", 2.0)
    task = TaskQueue(paths.home("opus").tasks).add("Write notes/a.md")
    actor = Actor(call("write_file", path="notes/a.md", content="a"), price=OPUS_PRICE)
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "daily_cap" and "daily cap" in result.reason
    assert actor.requests == [] and result.calls == 0
    assert TaskQueue(paths.home("opus").tasks).where(task.id) == "queue"


def test_a_call_that_would_cross_mid_wake_is_not_made_and_the_task_waits(civ: Path) -> None:
    """$0.05 left: the small side calls fit, the execute call's worst case (4096 output
    tokens at $25/M) does not. The task is not failed: it waits with a note."""
    caps("opus", 2.0)
    spent_already("opus", 1.95)
    task = TaskQueue(paths.home("opus").tasks).add("Write notes/a.md")
    actor = Actor(call("write_file", path="notes/a.md", content="a"), price=OPUS_PRICE)
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert "execute" not in actor.purposes() and actor.purposes()  # side calls were made
    assert result.status == "daily_cap", result.reason
    tasks = TaskQueue(paths.home("opus").tasks)
    assert tasks.where(task.id) == "active"
    notes = [h.get("note", "") for h in tasks.load("active", task.id).history]
    assert any("paused by the daily budget" in n for n in notes)


def test_the_civilizations_cap_counts_every_citizen(civ: Path) -> None:
    caps("opus", 10.0, civilization=3.0)
    spent_already("mira", 1.5)
    spent_already("aria", 1.5)
    TaskQueue(paths.home("opus").tasks).add("Write notes/a.md")
    actor = Actor(call("write_file", path="notes/a.md", content="a"), price=OPUS_PRICE)
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "daily_cap" and "civilization's $3.00 daily cap" in result.reason


@pytest.fixture
def ledgers_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Whose ledger each `spend.spent` read, in order."""
    read: list[str] = []
    real = spend.spent

    def spy(home: paths.Home, day: Any) -> float:
        read.append(home.name)
        return real(home, day)

    monkeypatch.setattr(spend, "spent", spy)
    return read


def test_a_wake_reads_its_peers_ledgers_once_not_once_a_call(
        civ: Path, ledgers_read: list[str]) -> None:
    """Each call's check read every peer's ledger: a wake's cost grew with the headcount
    (6 ms a call at 1,000 citizens). The peers are summed at the first check; each call
    after adds only its own citizen's spend (the broker checks every call as it is)."""
    read = ledgers_read
    TaskQueue(paths.home("opus").tasks).add("Write notes/a.md saying a")
    actor = Actor(call("write_file", path="notes/a.md", content="a"),
                  call("task_complete", summary="notes/a.md says a"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.calls >= 4
    assert read.count("mira") == read.count("aria") == 1
    assert read.count("opus") > result.calls  # its own cap: before and after every call


def test_the_brokers_total_spares_the_first_check_every_peers_ledger(
        civ: Path, ledgers_read: list[str]) -> None:
    read = ledgers_read
    spent_already("opus", 0.5)
    peers = [paths.home("mira"), paths.home("aria")]
    daily = spend.Daily(paths.home("opus"), 10.0, 3.0, peers, civilization=lambda: 2.9)
    daily.check(0.1)  # 2.9 everyone's (0.5 of them opus's) + 0.1 = 3.0: the boundary
    with pytest.raises(spend.DailyCapReached, match=r"civilization's \$3.00 daily cap"):
        daily.check(0.1 + 1e-6)
    assert read == ["opus"] * 2  # its own cap only: no peer's ledger
    no_broker = spend.Daily(paths.home("opus"), 10.0, 3.0, peers, civilization=lambda: None)
    spent_already("mira", 2.5)
    with pytest.raises(spend.DailyCapReached):
        no_broker.check(0.1)  # 0.5 + 2.5 read from the peers' ledgers + 0.1 > 3.0
    assert {"mira", "aria"} <= set(read)


def test_the_operators_hear_once_at_80_percent(civ: Path) -> None:
    caps("opus", 1.0)
    spent_already("opus", 0.85)
    for _ in range(2):
        TaskQueue(paths.home("opus").tasks).add("say hi")
        actor = Actor(call("task_complete", summary="hi said"), price=OPUS_PRICE)
        run_wake("opus", wake_type="TASK", provider=provides(actor))
    warnings = [e for p in wakelog.wake_logs(paths.home("opus"))
                for e in wakelog.read(p) if e["event"] == "daily_cap_warning"]
    assert len(warnings) == 1 and "of its $1.00 daily model budget" in warnings[0]["message"]


def test_every_call_is_in_the_days_ledger(civ: Path) -> None:
    TaskQueue(paths.home("opus").tasks).add("Write notes/a.md saying a")
    actor = Actor(call("write_file", path="notes/a.md", content="a"),
                  call("task_complete", summary="notes/a.md says a"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    lines = spend.lines(paths.home("opus"), spend.today())
    logged = [e for e in wakelog.read(result.log_path) if e["event"] == "llm_call"]
    assert len(lines) == len(logged) == result.calls
    assert [x["purpose"] for x in lines] == [e["purpose"] for e in logged]


def test_rollups_are_metered_and_citizen_cost_is_the_whole_bill(
        civ: Path, messages_api: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory roll-ups called the model outside the meter: "$ today" under-reported.
    Now they are in the ledger, and `citizen cost` equals the wake logs to the cent."""
    from datetime import UTC, datetime, timedelta

    from click.testing import CliRunner

    from citizen.cli import cli
    from citizen.home.memory import Memory
    from tests.anthropic_server import API_KEY, text

    server: MessagesServer = messages_api  # type: ignore[assignment]
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("EXPERIENCE_PROVIDER", "anthropic")
    mem = Memory(paths.home("opus").memory)
    mem.record(1, "TASK", "wrote the report", when=datetime.now(UTC) - timedelta(days=1))
    for _ in range(3):
        server.reply(text("a summary", input_tokens=1000, output_tokens=100))
    runner = CliRunner()
    rolled = runner.invoke(cli, ["memory", "rollup", "opus"])
    assert rolled.exit_code == 0, rolled.output
    lines = spend.lines(paths.home("opus"), spend.today())
    assert lines and {x["wake_type"] for x in lines} == {"ROLLUP"}
    assert all(x["purpose"].startswith("rollup_") for x in lines)
    TaskQueue(paths.home("opus").tasks).add("say hi")
    actor = Actor(call("task_complete", summary="hi said"))
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    out = runner.invoke(cli, ["cost", "--json", "--by", "wake-type"])
    assert out.exit_code == 0, out.output
    rows = {r["wake-type"]: r for r in json.loads(out.output)}
    assert set(rows) == {"ROLLUP", "TASK"}
    logged = sum(e["cost_usd"] for p in wakelog.wake_logs(paths.home("opus"), calls=True)
                 for e in wakelog.read(p) if e["event"] == "wake_end")
    assert logged > 0
    assert round(sum(r["usd"] for r in rows.values()), 2) == round(logged, 2)
    assert rows["ROLLUP"]["calls"] == len(lines) and rows["ROLLUP"]["tokens_in"] > 0
    rollup = rows["ROLLUP"]
    assert rollup["prompt_per_call"] == round(
        (rollup["tokens_in"] + rollup["cache_read"] + rollup["cache_write"]) / rollup["calls"])
    status = runner.invoke(cli, ["status", "--json"])
    opus = next(r for r in json.loads(status.output) if r["citizen"] == "opus")
    assert opus["usd_today"] == pytest.approx(logged, abs=1e-6)


def limits(name: str, **budget: int) -> None:
    cfg = paths.home(name).config
    data = json.loads(cfg.read_text())
    data["budget"] = {**data.get("budget", {}), **budget}
    cfg.write_text(json.dumps(data))


def test_a_runaway_model_opens_no_more_debates_or_proposals_than_a_day_allows(
        civ: Path) -> None:
    """The attack: a model that starts a debate (a ≈50-move-wake affair) every wake."""
    limits("opus", max_debates_per_day=1, max_proposals_per_day=1)
    TaskQueue(paths.home("opus").tasks).add("stir things up")
    actor = Actor(call("debate_start", topic="tabs or spaces", participants="mira"),
                  call("debate_start", topic="tabs or spaces, again", participants="mira"),
                  call("propose", task="rewrite everything"),
                  call("propose", task="rewrite everything, again"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    outcomes = [(e["tool"], e["error"], e["result"]) for e in wakelog.read(result.log_path)
                if e["event"] == "tool_call"]
    assert [o[1] for o in outcomes] == [False, True, False, True], outcomes
    assert "opened 1 debates today" in outcomes[1][2]
    assert "opened 1 proposals today" in outcomes[3][2]
    assert len(civilization_debates()) == 1


def civilization_debates() -> list[str]:
    from citizen import civilization

    return civilization.debates().ids()


def test_a_task_ends_at_its_call_cap_saying_so(civ: Path) -> None:
    limits("opus", max_calls_per_task=3)
    (civ / "opus" / "a.txt").write_text("a")
    task = TaskQueue(paths.home("opus").tasks).add("Look at a.txt closely")
    steps = [call("shell_command", command=f"echo {i}") for i in range(10)]
    actor = Actor(*steps)
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    failed = TaskQueue(paths.home("opus").tasks).load("failed", task.id)
    assert "used its 3 model calls" in failed.result
    assert failed.meta["calls"] == 3
    # the deliverables are read as the task is taken; then three calls, and no fourth
    assert actor.purposes() == ["task_deliverables", "select_tools", "route", "execute"]


def test_doorbell_wakes_past_the_hours_limit_wait_for_the_window(civ: Path) -> None:
    from citizen.daemon.process import Daemon
    from citizen.daemon.requests import WakeRequest

    limits("opus", max_doorbell_wakes_per_hour=2)
    daemon = Daemon("opus")
    ring = WakeRequest("DEBATE", "doorbell: debate d-1 started")
    assert [daemon._over_doorbell_limit(ring) for _ in range(3)] == [False, False, True]
    (job,) = daemon.scheduler.get_jobs()
    assert job.args == ("DEBATE", "doorbell: debate d-1 started")


# ------------------------------------------------------------------ the simulated clock

MONDAY = 1767571200.0  # 2026-01-05T00:00:00Z


def test_a_simulated_day_is_the_ledgers_day_and_the_schedulers_interval(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/month.py runs real daemons on `EXPERIENCE_CLOCK`: the day the caps count and
    the scheduler's intervals are world time; liveness stays on the wall clock."""
    import time
    from datetime import date

    from citizen.daemon.process import Daemon
    from shared import clock, monitor

    monkeypatch.setenv(clock.CLOCK_ENV, f"{MONDAY},{time.time()},1440")  # a day a minute
    assert clock.today() == date(2026, 1, 5)
    spent_already("opus", 0.25)
    assert spend.spent(paths.home("opus"), date(2026, 1, 5)) == 0.25
    daemon = Daemon("opus")
    minutes = config.load_citizen("opus").wake_interval_minutes
    assert daemon.interval_s == pytest.approx(minutes * 60 / 1440)
    assert daemon.doorbell_window_s == pytest.approx(3600 / 1440)  # an hour of world time
    daemon._heartbeat()  # written now: fresh, however fast world time runs
    assert monitor.check_heartbeat(paths.home("opus").heartbeat) == []


def test_a_bad_simulated_clock_says_what_it_wants(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared import clock

    monkeypatch.setenv(clock.CLOCK_ENV, "tomorrow")
    with pytest.raises(ValueError, match=r"START,ANCHOR,SPEED .* unset it"):
        clock.time()
    monkeypatch.setenv(clock.CLOCK_ENV, "0,0,0")
    with pytest.raises(ValueError, match="SPEED must be above 0"):
        clock.time()
    monkeypatch.delenv(clock.CLOCK_ENV)
    assert abs(clock.time() - __import__("time").time()) < 1


def test_the_doctors_call_is_metered_too(civ: Path, messages_api: MessagesServer,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`citizen doctor` makes one real call: it was outside the meter, so "$ today" and
    `citizen cost` missed it. Now it is in the ledger and its own log, like `citizen ask`."""
    from click.testing import CliRunner

    from citizen.cli import cli
    from tests.anthropic_server import API_KEY, text

    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_api.url)
    messages_api.reply(text("ready", input_tokens=12, output_tokens=2))
    result = CliRunner().invoke(cli, ["doctor", "--citizen", "mira"])
    assert result.exit_code == 0, result.output
    (line,) = spend.lines(paths.home("mira"), spend.today())
    assert line["purpose"] == "doctor" and line["cost_usd"] == pytest.approx(22e-6)
    (log,) = paths.home("mira").wake_logs.glob("*-DOCTOR.jsonl")
    assert wakelog.read(log)[-1]["cost_usd"] == pytest.approx(22e-6)


def test_a_ledger_is_read_once_then_only_what_was_appended(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The meter asks before and after every call, for itself and each peer: a ledger
    that did not grow is not read again, and a grown one from where the last read ended."""
    spent_already("opus", 0.25)
    path = spend.ledger(paths.home("opus"), spend.today())
    reads: list[int] = []
    real_open = Path.open
    real_plain = door.open_plain

    def spy(where: Path, *args: Any, **kwargs: Any) -> Any:
        fh = real_plain(where, *args, **kwargs)
        if where == path:
            reads.append(0)
        return fh

    monkeypatch.setattr(door, "open_plain", spy)  # the one way a ledger is opened
    assert [spend.spent(paths.home("opus"), spend.today()) for _ in range(3)] == [0.25] * 3
    assert len(reads) == 1
    with real_open(path, "a") as fh:
        fh.write('{"cost_usd": 0.')  # a writer in the middle of its line
    assert spend.spent(paths.home("opus"), spend.today()) == 0.25  # the half line waits
    with real_open(path, "a") as fh:
        fh.write('5}\n')
    assert spend.spent(paths.home("opus"), spend.today()) == 0.75
    replaced = path.with_name(".replaced")
    replaced.write_text('{"cost_usd": 0.125}\n')
    replaced.replace(path)  # another file under the name: summed afresh
    assert spend.spent(paths.home("opus"), spend.today()) == 0.125


def test_a_ledgers_path_is_built_once_a_day(civ: Path) -> None:
    """The meter asks for its own and every peer's ledger several times a call: the path
    is built once per home and day (the same object), a new day's afresh."""
    home, day = paths.home("opus"), spend.today()
    first = spend.ledger(home, day)
    assert spend.ledger(home, day) is first
    assert first == home.dir / "logs" / "spend" / f"{day.isoformat()}.jsonl"
    tomorrow = spend.ledger(home, day + timedelta(days=1))
    assert tomorrow != first and tomorrow.name == f"{(day + timedelta(days=1)).isoformat()}.jsonl"
    assert spend.ledger(paths.home("mira"), day).parent == paths.home("mira").dir / "logs" / "spend"
