"""The daemon as a real process: doorbell, one daemon per citizen, signals, persistent slots."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import pytest

from citizen import config
from citizen.config import paths
from citizen.home import wakelog
from citizen.home.tasks import TaskQueue
from tests.anthropic_server import MessagesServer, no_deliverables, tool_use
from tests.daemons import daemon_env, heartbeat, start, wait_for, worker

IDLE = ("--interval", "3600", "--first-wake", "3600")  # only the doorbell wakes it


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return out


def test_a_rung_task_is_done_within_seconds(civ: Path, messages_api: MessagesServer) -> None:
    messages_api.responder = worker
    env = daemon_env(civ, messages_api)
    proc = start(env, "opus", *IDLE)
    try:
        wait_for(lambda: heartbeat(civ).get("state") == "sleeping")
        added = subprocess.run([sys.executable, "-m", "citizen", "task", "add", "opus",
                                "Write notes/out.md"], env=env, capture_output=True, text=True,
                               check=True)
        assert "queued" in added.stdout
        tasks = TaskQueue(paths.home("opus").tasks)
        started = time.monotonic()
        wait_for(lambda: tasks.ids("done"), timeout=30)
        assert time.monotonic() - started < 15
        assert (civ / "opus" / "notes" / "out.md").read_text() == "from the daemon"
        beat = heartbeat(civ)
        assert beat["pid"] == proc.pid and beat["rss_mb"] > 0
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert "doorbell: TASK wake" in out and ": ok in" in out
    (log,) = wakelog.wake_logs(paths.home("opus"))
    assert wakelog.summary(log)["reason"].startswith("doorbell: task t-")


def test_a_second_daemon_for_the_same_citizen_refuses(civ: Path,
                                                      messages_api: MessagesServer) -> None:
    env = daemon_env(civ, messages_api)
    first = start(env, "opus", *IDLE)
    try:
        wait_for(lambda: heartbeat(civ).get("state") == "sleeping")
        second = start(env, "opus", *IDLE)
        out, _ = second.communicate(timeout=30)
        assert second.returncode == 1
        assert f"already has a running daemon (pid {first.pid})" in out
        assert "Traceback" not in out
    finally:
        stop(first)


def test_first_sigterm_lets_the_wake_finish(civ: Path, messages_api: MessagesServer) -> None:
    messages_api.reply(no_deliverables())  # what the task must leave
    messages_api.reply(tool_use("respond", {"tools": ["task_complete"]}))  # tool selection
    messages_api.reply(tool_use("respond", {"tier": "fast"}))
    messages_api.reply(tool_use("task_complete", {"summary": "slowly"}), delay_s=3)
    messages_api.reply(tool_use("respond", {"verdict": "pass", "reason": "ok"}))  # the verifier
    env = daemon_env(civ, messages_api)
    TaskQueue(paths.home("opus").tasks).add("slow one")
    proc = start(env, "opus", "--interval", "3600", "--first-wake", "3600")
    try:
        subprocess.run([sys.executable, "-m", "citizen", "task", "add", "opus", "ring"],
                       env=env, check=True, capture_output=True)
        wait_for(lambda: heartbeat(civ).get("state") == "waking")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "stopping after the current wake" in out
    assert TaskQueue(paths.home("opus").tasks).ids("done")  # the wake was allowed to finish
    assert heartbeat(civ)["state"] == "stopped"


def test_second_sigterm_stops_at_once(civ: Path, messages_api: MessagesServer) -> None:
    messages_api.reply(no_deliverables())  # what the task must leave
    messages_api.reply(tool_use("respond", {"tools": ["task_complete"]}))  # tool selection
    messages_api.reply(tool_use("respond", {"tier": "fast"}))
    messages_api.reply(tool_use("task_complete", {"summary": "never"}), delay_s=30)
    env = daemon_env(civ, messages_api)
    proc = start(env, "opus", *IDLE)
    try:
        subprocess.run([sys.executable, "-m", "citizen", "task", "add", "opus", "slow"],
                       env=env, check=True, capture_output=True)
        wait_for(lambda: len(messages_api.requests) >= 4)  # the slow call is in flight
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping after the current wake" in proc.output())  # it heard the first
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "stopping now" in out
    tasks = TaskQueue(paths.home("opus").tasks)
    assert tasks.ids("active") and not tasks.ids("done")  # interrupted: requeued next start
    (log,) = wakelog.wake_logs(paths.home("opus"))
    assert wakelog.summary(log)["status"] == "interrupted"


def test_slots_survive_restarts(civ: Path, messages_api: MessagesServer) -> None:
    env = daemon_env(civ, messages_api)
    for run in (3, 4):
        proc = start(env, "mira", "--interval", "0.2", "--first-wake", "0", "--max-wakes",
                     str(run))
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
    types = [wakelog.summary(p)["type"] for p in wakelog.wake_logs(paths.home("mira"))]
    slots = config.templates().wake_slots("mira")
    assert types == [slots[i] for i in range(7)]
    state = json.loads((civ / "mira" / "state.json").read_text())
    assert state["slots"] == 7 and state["wakes"] == 7
    assert not messages_api.requests  # every wake was idle or skipped: no model call at all


def _starts(name: str) -> list[float]:
    """When each wake of `name` began (its first event), oldest first."""
    return sorted(datetime.fromisoformat(wakelog.read(p)[0]["ts"]).timestamp()
                  for p in wakelog.wake_logs(paths.home(name)))


@pytest.mark.parametrize("who", ["mira", "--all"])
def test_a_daemon_frozen_for_many_slots_wakes_once_when_thawed(
        civ: Path, messages_api: MessagesServer, who: str) -> None:
    """Coalescing and misfire grace: slots missed while the daemon could not run (a frozen
    process, a suspended machine) become at most one wake when it runs again - never a
    burst of one wake per missed slot - and the schedule goes on from there. The same
    for a citizen hosted with every other in one process (`run --all`)."""
    env = daemon_env(civ, messages_api)
    proc = start(env, who, "--interval", "0.5", "--first-wake", "0")
    try:
        wait_for(lambda: len(_starts("mira")) >= 2)
        proc.send_signal(signal.SIGSTOP)
        frozen = len(_starts("mira"))
        time.sleep(5)  # the freeze itself: 10 slots come and go while it cannot run
        assert len(_starts("mira")) == frozen
        thawed = time.time()
        proc.send_signal(signal.SIGCONT)
        wait_for(lambda: [t for t in _starts("mira") if t > thawed + 1.5], timeout=60)
    finally:
        stop(proc)
    after = [t for t in _starts("mira")[frozen:] if t <= thawed + 1.5]
    # The catch-up wake (if its slot was within the grace) and the next regular slots:
    # at most 1 + 1.5 s / 0.5 s of schedule - the 10 missed slots would be 13.
    assert len(after) <= 4, [round(t - thawed, 2) for t in after]
    gaps = [b - a for a, b in pairwise(after)]
    assert all(g > 0.2 for g in gaps), gaps  # no two wakes back to back: no burst
