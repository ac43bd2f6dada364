"""Idle wakes start no process (issue 33): the daemon runs the gate where the schedule
lives and logs an idle wake as the wake process would; a wake with work - a task, a slot
whose type has something to do - still starts its process. First wakes are spread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from citizen import config
from citizen.access.permit import Permit
from citizen.config import paths
from citizen.daemon import timing
from citizen.daemon.process import Daemon
from citizen.daemon.requests import WakeRequest
from citizen.home import state, wakelog
from citizen.home.memory import Memory
from citizen.home.tasks import TaskQueue
from citizen.wake.flow import run_wake
from shared import gitsafe
from shared.atomic import write_json


class Spawned(Exception):
    """A process was started."""


class FakeChild:
    """A wake process that exits at once, having done nothing."""

    pid = 0

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def poll(self) -> int:
        return 0


@pytest.fixture
def no_process(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record every wake process the daemon would start (and fail on any git process)."""
    started: list[list[str]] = []

    def popen(args: list[str], **_: Any) -> FakeChild:
        started.append(list(args))
        return FakeChild()

    def git(*_: Any, **__: Any) -> None:
        raise Spawned("a git process was started")

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(gitsafe, "run", git)
    # The broker's wake permit, granted at once: a broker is a process too.
    monkeypatch.setattr(Permit, "wait", lambda self, *_, **__: self)
    monkeypatch.setattr(Permit, "watch", lambda self, lost: None)
    return started


def events(path: Path) -> list[tuple[str, list[str]]]:
    return [(e["event"], sorted(e)) for e in wakelog.read(path)]


def test_an_idle_slot_is_logged_by_the_daemon_without_a_process(
        civ: Path, no_process: list[list[str]]) -> None:
    home = paths.home("opus")
    daemon = Daemon("opus", interval_s=3600, first_wake_s=3600)
    for _ in range(3):
        daemon._wake(WakeRequest(None, "slot"))
    assert no_process == []  # neither a wake process nor a git process
    assert daemon.wakes_run == 3
    logs = wakelog.wake_logs(home)
    assert [wakelog.summary(p)["status"] for p in logs] == ["idle"] * 3
    assert state.load(home)["slots"] == 3 and state.load(home)["wakes"] == 3
    # The same events and fields as the wake process writes for an idle wake of its own.
    first = wakelog.read(logs[0])
    assert first[0]["pid"] == os.getpid() and first[0]["reason"] == "slot"
    own = run_wake("opus", wake_type=wakelog.summary(logs[0])["type"], number=99, slot=0,
                   reason="slot")
    assert own.status == "idle"
    assert events(logs[0]) == events(own.log_path)


def test_a_wake_with_work_still_starts_its_process(civ: Path,
                                                   no_process: list[list[str]]) -> None:
    home = paths.home("opus")
    TaskQueue(home.tasks).add("write the notes")
    daemon = Daemon("opus", interval_s=3600, first_wake_s=3600)
    daemon._wake(WakeRequest("TASK", "doorbell: task added"))
    (args,) = no_process
    assert args[args.index("--number") + 1] == "1" and args[args.index("--type") + 1] == "TASK"
    # The wake process writes its log, gate and all: the daemon wrote none for it.
    assert not list(home.wake_logs.glob("000001-*"))


def test_a_slot_whose_type_has_work_without_a_task_starts_its_process(
        civ: Path, no_process: list[list[str]]) -> None:
    """REFLECT has work when a work wake happened since the last reflection - no task needed."""
    home = paths.home("opus")
    slots = config.templates().wake_slots("opus")
    reflect = min(i for i, kind in slots.items() if kind == "REFLECT")
    state.ensure(home)
    data = state.load(home)
    write_json(home.state, {**data, "slots": reflect})  # the next slot is a REFLECT
    Memory(home.memory).record(1, "TASK", "TASK wake 1: did a thing")
    daemon = Daemon("opus", interval_s=3600, first_wake_s=3600)
    daemon._wake(WakeRequest(None, "slot"))
    (args,) = no_process
    assert args[args.index("--slot") + 1] == str(reflect)


def own_code_at(home: paths.Home, commit: str) -> None:
    """A ~/code of the citizen's own, its HEAD at `commit` (read from files, as the daemon)."""
    (home.code / "citizen").mkdir(parents=True, exist_ok=True)
    (home.code / "citizen" / "__init__.py").write_text("")
    (home.code / ".git").mkdir(exist_ok=True)
    (home.code / ".git" / "HEAD").write_text(commit + "\n")


def test_the_daemon_gates_only_last_known_good_code_it_started_on(
        civ: Path, no_process: list[list[str]]) -> None:
    """A commit no wake process has completed on yet is proven by one (last-known-good,
    what a rollback returns to); after a commit (an adoption) the wake process decides."""
    home = paths.home("opus")
    own_code_at(home, "a" * 40)
    daemon = Daemon("opus", interval_s=3600, first_wake_s=3600)
    with pytest.raises(Spawned):  # not yet known good: the usual path, through git
        daemon._wake(WakeRequest(None, "slot"))
    state.mark(home, "last_known_good", "a" * 40)  # what that wake process's end records
    daemon._wake(WakeRequest(None, "slot"))
    assert no_process == [] and daemon.wakes_run == 1
    own_code_at(home, "b" * 40)  # an adoption moved it
    with pytest.raises(Spawned):
        daemon._wake(WakeRequest(None, "slot"))


def test_first_wakes_are_spread_by_name(civ: Path) -> None:
    names = [f"c{i:03d}" for i in range(200)]
    firsts = [timing.first_wake_s(n, 120) for n in names]
    assert all(1.0 <= f <= 61.0 for f in firsts)
    assert max(firsts) - min(firsts) > 50  # spread over the minute, not all at 1 s
    assert len({round(f, 3) for f in firsts}) > 190
    assert [timing.first_wake_s(n, 120) for n in names] == firsts  # fixed by the name
    assert all(1.0 <= timing.first_wake_s(n, 10) <= 11.0 for n in names)  # within the interval
    # The daemon's default is that spread; --first-wake still says exactly when.
    assert Daemon("opus", interval_s=120).first_wake_s == timing.first_wake_s("opus", 120)
    assert Daemon("opus", interval_s=120, first_wake_s=0).first_wake_s == 0


def test_the_cli_leaves_the_first_wake_to_the_daemon(civ: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "citizen", "run", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--first-wake" in out and "default: 1.0" not in out


def test_a_ring_is_served_before_a_slot_queued_ahead_of_it(civ: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Rung work first (daemon/requests.py): with a short interval a slot's request always
    waits, and served in arrival order it held a reviewer's REVIEW ring behind REFLECT,
    then LIBRARY - the demo's reviews came minutes late. Rings keep their own order."""
    daemon = Daemon("opus", interval_s=60, max_wakes=3)
    served: list[str | None] = []

    def run(req: WakeRequest) -> None:
        served.append(req.wake_type)
        daemon.wakes_run += 1

    monkeypatch.setattr(daemon, "_run_wake", run)
    daemon.slot_due()  # the slot came first
    daemon._request("REVIEW", "doorbell: opus announced change opus-1")
    daemon.slot_due()  # coalesced into the slot already waiting
    daemon._request("TASK", "doorbell: task t-1")
    daemon._main_loop()
    assert served == ["REVIEW", "TASK", None]
