"""No stampede (issue 43): real daemons take the broker's wake permits, so however many
citizens are rung at once, at most `max_working_wakes` wakes work at the same time - the
others wait, costing no process, and say so in their heartbeat, `citizen status` and the
dashboard; a SIGTERM ends a daemon's wait at once.

Six citizens, three with a daemon each and three hosted by one process (`run --all`):
one bound covers both. Before the permits, every rung wake started its process at once.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest

from bench.stats import peak
from citizen.access.permit import Permit
from citizen.admin import founding
from citizen.config import paths
from citizen.home import state, wakelog
from citizen.home.tasks import TaskQueue
from shared import clock, doorbell
from tests.anthropic_server import MessagesServer
from tests.daemons import Daemon, cli, daemon_env, have_run, heartbeat, start, wait_for, worker
from tests.test_daemon_crowd import held
from tests.test_web_app import logged_in

NAMES = tuple(f"w{i}" for i in range(6))
OWN, HOSTED = NAMES[:3], NAMES[3:]  # a daemon each; one `citizen run --all` for the rest
IDLE = ("--interval", "3600", "--first-wake", "3600")  # only the doorbell wakes them


@pytest.fixture
def six(civ_root: Path, rules_dir: Path) -> Path:
    founding.init_shared()
    for name in NAMES:
        founding.init_citizen(name, {"email": f"{name}@example.org", "focus": "tests"})
    (rules_dir / "broker.json").write_text(json.dumps({"max_working_wakes": 2}))
    return civ_root


def stop(proc: Daemon) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=90)
    return out


def ring_tasks(names: tuple[str, ...]) -> None:
    """A task for each, then every doorbell at once."""
    for name in names:
        TaskQueue(paths.home(name).tasks).add("Write notes/out.md")
    for name in names:
        doorbell.ring(paths.home(name).doorbell, "TASK", "a task")


def states(root: Path, names: tuple[str, ...]) -> Counter[str]:
    return Counter(heartbeat(root, n).get("state", "") for n in names)


def spans(names: tuple[str, ...]) -> list[tuple[float, float]]:
    """Each wake process's logged life: from its first event to its last (inside the
    process, so inside the permit it ran under)."""
    out = []
    for name in names:
        for path in wakelog.wake_logs(paths.home(name)):
            events = wakelog.read(path)
            out.append((clock.epoch(events[0]["ts"]), clock.epoch(events[-1]["ts"])))
    return out


def test_six_rung_at_once_never_work_more_than_two_at_a_time(
        six: Path, messages_api: MessagesServer) -> None:
    release = held(messages_api)  # the model answers once the test has looked
    env = daemon_env(six, messages_api)
    procs = [start(env, name, *IDLE) for name in OWN]
    try:
        wait_for(lambda: states(six, OWN)["sleeping"] == 3, timeout=60)
        procs.append(start(env, "--all", *IDLE, "--parallel", "3"))
        wait_for(lambda: states(six, NAMES)["sleeping"] == 6, timeout=60)
        ring_tasks(NAMES)
        # Two work (their model waits for the test); four wait for a permit, no process.
        wait_for(lambda: states(six, NAMES) == {"waking": 2, "waiting": 4}, timeout=90)
        rows = {r["citizen"]: r for r in json.loads(cli(env, "status", "--json"))}
        waiting = [n for n, r in rows.items() if r["waiting"]]
        assert len(waiting) == 4, rows
        for name in waiting:
            assert "waiting for a wake permit (" in rows[name]["daemon"], rows[name]
            assert rows[name]["wake_permit"]["state"] == "waiting", rows[name]
        assert sorted(r["wake_permit"]["state"] for r in rows.values()) == \
            ["held"] * 2 + ["waiting"] * 4
        table = cli(env, "status")
        assert "wake permits: 2 of 2 held (" in table and "; 4 waiting (" in table, table
        page = logged_in(six).get("/").text
        assert "Wake permits: 2 of 2 in use" in page and "4 waiting" in page, page
        assert page.count('<span class="waiting">waiting for a wake permit (') == 4, page
        release.set()
        wait_for(lambda: all(TaskQueue(paths.home(n).tasks).ids("done") for n in NAMES),
                 timeout=240)
    finally:
        release.set()
        outs = [stop(p) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    lives = spans(NAMES)
    assert len(lives) == 6, lives  # every citizen's wake ran, once
    assert 1 <= peak(lives) <= 2, sorted(lives)


def test_a_daemon_waiting_for_its_permit_stops_at_once(
        civ: Path, rules_dir: Path, messages_api: MessagesServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    (rules_dir / "broker.json").write_text(json.dumps({"max_working_wakes": 1}))
    messages_api.responder = worker
    env = daemon_env(civ, messages_api)
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):  # one dev broker for both of us
        monkeypatch.setenv(key, env[key])  # (one from another environment is replaced)
    proc = start(env, "opus", *IDLE)
    try:
        wait_for(lambda: heartbeat(civ, "opus").get("state") == "sleeping")
        with Permit("aria").wait():  # the civilization's one permit, held elsewhere
            ring_tasks(("opus",))
            wait_for(lambda: heartbeat(civ, "opus").get("state") == "waiting")
            assert heartbeat(civ, "opus")["waiting"] == "for a wake permit (0 ahead)"
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=10)  # at once, though the permit never came
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "not started - stopping while it waited for its wake permit" in out, out
    assert wakelog.wake_logs(paths.home("opus")) == []  # no wake process ever ran
    # ...and its number went back: the next wake is wake 1, which `logs --wake 1` shows
    assert state.load(paths.home("opus"))["wakes"] == 0
    assert TaskQueue(paths.home("opus").tasks).ids("queue")  # left for its next wake


def test_the_schedulers_wake_units_take_permits_too(
        civ: Path, rules_dir: Path, messages_api: MessagesServer) -> None:
    """The server's scheduler shape (`run --all --scheduler`, each wake its own one-shot
    as the citizen): its units wait for permits as a daemon does."""
    (rules_dir / "broker.json").write_text(json.dumps({"max_working_wakes": 1}))
    names = ("opus", "mira", "aria")
    have_run(names)
    release = held(messages_api)
    env = daemon_env(civ, messages_api)
    proc = start(env, "--all", "--scheduler", *IDLE, "--parallel", "3")
    try:
        wait_for(lambda: "3 citizens in one process" in proc.output(), timeout=60)
        ring_tasks(names)
        wait_for(lambda: states(civ, names) == {"waking": 1, "waiting": 2}, timeout=90)
        release.set()
        wait_for(lambda: all(TaskQueue(paths.home(n).tasks).ids("done") for n in names),
                 timeout=180)
    finally:
        release.set()
        out = stop(proc)
    assert proc.returncode == 0, out
    lives = spans(names)
    assert len(lives) == 3 and peak(lives) == 1, sorted(lives)
