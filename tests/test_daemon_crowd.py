"""`citizen run --all`: every citizen's daemon in one process (issue 33). Each citizen
keeps its own schedule, doorbell, counters and one wake at a time; different citizens'
wakes do not wait for each other; a citizen whose daemon already runs is left out."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from citizen.cli import run as run_command
from citizen.config import paths
from citizen.home import state, wakelog
from citizen.home.tasks import TaskQueue
from shared import doorbell
from tests.anthropic_server import MessagesServer
from tests.daemons import Daemon, daemon_env, heartbeat, start, wait_for, worker

NAMES = ("aria", "mira", "opus")
IDLE = ("--interval", "3600", "--first-wake", "3600")  # only the doorbell wakes them


def stop(proc: Daemon) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return out


def logs(name: str) -> list[list[dict[str, Any]]]:
    return [wakelog.read(p) for p in wakelog.wake_logs(paths.home(name))]


def held(api: MessagesServer) -> threading.Event:
    """Make the model a worker that answers only once the returned event is set."""
    release = threading.Event()

    def slow(body: dict[str, Any]) -> dict[str, Any] | None:
        release.wait(timeout=120)  # a test that never releases fails, it does not hang
        return worker(body)

    api.responder = slow
    return release


def test_one_process_keeps_every_citizens_schedule(civ: Path,
                                                   messages_api: MessagesServer) -> None:
    proc = start(daemon_env(civ, messages_api), "--all", "--interval", "0.5",
                 "--first-wake", "0")
    try:
        wait_for(lambda: all(len(logs(n)) >= 4 for n in NAMES), timeout=60)
        beats = {n: heartbeat(civ, n) for n in NAMES}
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert {b["pid"] for b in beats.values()} == {proc.pid}  # one process beats for all
    for name in NAMES:
        wakes = logs(name)
        # The first wake runs in a process (no wake has completed on this code yet); the
        # idle ones after it are gated in the one process.
        assert {w[0]["pid"] for w in wakes[1:]} == {proc.pid}, name
        assert all(w[-1]["status"] in ("idle", "skipped") for w in wakes), name
        # Each citizen's own counters: its slots in order, none shared or skipped.
        assert [w[0]["slot"] for w in wakes] == list(range(len(wakes))), name
        assert state.load(paths.home(name))["slots"] == len(wakes)
    assert not messages_api.requests  # idle wakes: no model call at all


def test_a_ring_wakes_only_its_citizen(civ: Path, messages_api: MessagesServer) -> None:
    messages_api.responder = worker
    env = daemon_env(civ, messages_api)
    proc = start(env, "--all", *IDLE)
    try:
        wait_for(lambda: all(heartbeat(civ, n).get("state") == "sleeping" for n in NAMES))
        subprocess.run([sys.executable, "-m", "citizen", "task", "add", "mira",
                        "Write notes/out.md"], env=env, check=True, capture_output=True)
        wait_for(lambda: TaskQueue(paths.home("mira").tasks).ids("done"), timeout=60)
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert (civ / "mira" / "notes" / "out.md").read_text() == "from the daemon"
    assert [w[0]["reason"][:15] for w in logs("mira")] == ["doorbell: task "]
    assert logs("opus") == [] and logs("aria") == []


def test_a_long_wake_holds_only_its_own_citizen(civ: Path,
                                                messages_api: MessagesServer) -> None:
    """mira's task wake waits on its model and takes the one wake process allowed; opus
    and aria keep waking meanwhile (their gates do not wait behind it), and mira's next
    request waits for her wake to end (one wake a citizen at a time)."""
    release = held(messages_api)
    env = daemon_env(civ, messages_api)
    proc = start(env, "--all", "--interval", "0.5", "--first-wake", "0", "--parallel", "1")
    try:
        wait_for(lambda: all(heartbeat(civ, n).get("state") == "sleeping" for n in NAMES))
        subprocess.run([sys.executable, "-m", "citizen", "task", "add", "mira",
                        "Write notes/out.md"], env=env, check=True, capture_output=True)
        wait_for(lambda: messages_api.requests)  # mira's wake is waiting on its model
        before = {n: len(logs(n)) for n in NAMES}
        doorbell.ring(paths.home("mira").doorbell, "REFLECT", "a peer's report")
        wait_for(lambda: all(len(logs(n)) >= before[n] + 2 for n in ("opus", "aria")),
                 timeout=60)
        assert len(logs("mira")) == before["mira"]  # her ring and slots wait for her wake
        release.set()
        wait_for(lambda: TaskQueue(paths.home("mira").tasks).ids("done"), timeout=60)
    finally:
        release.set()
        out = stop(proc)
    assert proc.returncode == 0, out
    spans = sorted((_ts(w[0]), _ts(w[-1])) for w in logs("mira") if w[-1].get("event")
                   == "wake_end")
    assert all(end <= nxt for (_, end), (nxt, _) in pairwise(spans))


def test_wake_processes_are_bounded_by_parallel(civ: Path,
                                                 messages_api: MessagesServer) -> None:
    """Two citizens with a task each and `--parallel 1`: the second wake process starts
    only when the first has ended (a thousand tasks never start a thousand processes)."""
    release = held(messages_api)
    env = daemon_env(civ, messages_api)
    proc = start(env, "--all", *IDLE, "--parallel", "1")
    try:
        wait_for(lambda: all(heartbeat(civ, n).get("state") == "sleeping" for n in NAMES))
        for name in ("mira", "opus"):
            subprocess.run([sys.executable, "-m", "citizen", "task", "add", name,
                            "Write notes/out.md"], env=env, check=True, capture_output=True)
        wait_for(lambda: messages_api.requests)  # one wake waits on its model
        release.set()
        wait_for(lambda: all(TaskQueue(paths.home(n).tasks).ids("done")
                             for n in ("mira", "opus")), timeout=90)
    finally:
        release.set()
        out = stop(proc)
    assert proc.returncode == 0, out
    (first, second) = sorted((_ts(w[0]), _ts(w[-1])) for n in ("mira", "opus")
                             for w in logs(n))
    assert first[1] <= second[0], (first, second)


def test_a_citizen_whose_daemon_runs_is_left_out(civ: Path,
                                                 messages_api: MessagesServer) -> None:
    env = daemon_env(civ, messages_api)
    own = start(env, "opus", *IDLE)
    try:
        wait_for(lambda: heartbeat(civ, "opus").get("state") == "sleeping")
        crowd = start(env, "--all", *IDLE)
        try:
            wait_for(lambda: all(heartbeat(civ, n).get("pid") == crowd.pid
                                 for n in ("aria", "mira")))
            assert heartbeat(civ, "opus")["pid"] == own.pid
        finally:
            out = stop(crowd)
    finally:
        stop(own)
    assert crowd.returncode == 0, out
    assert f"opus: left out - citizen opus already has a running daemon (pid {own.pid})" in out


def _ts(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["ts"]).timestamp()


def test_all_is_refused_on_a_server(civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a server each citizen is its own user: one process must not host them (it would
    write homes and heartbeats not its own)."""
    monkeypatch.setattr(run_command, "server_mode", lambda: True)
    before = sorted(str(p) for p in civ.rglob("*"))
    result = CliRunner().invoke(run_command.run, ["--all", "--max-wakes", "1"])
    assert result.exit_code == 2, result.output
    assert "sudo systemctl start citizens.target" in result.output
    assert sorted(str(p) for p in civ.rglob("*")) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a home to another user (needs root)")
def test_a_home_not_ours_is_left_out_untouched(civ: Path,
                                               messages_api: MessagesServer) -> None:
    os.chown(civ / "mira", 65534, 65534)  # nobody's now
    proc = start(daemon_env(civ, messages_api), "--all", "--interval", "0.5",
                 "--first-wake", "0", "--max-wakes", "4")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "mira: left out - " in out and "belongs to another user" in out
    assert heartbeat(civ, "mira") == {}  # nothing written for her, by anyone
    assert logs("mira") == [] and logs("opus") and logs("aria")


def test_the_doorbells_hourly_window_is_each_citizens_own(
        civ: Path, messages_api: MessagesServer) -> None:
    """budget.max_doorbell_wakes_per_hour holds per citizen in the one process: mira's
    third ring this hour waits for her window; opus's ring does not wait for hers."""
    cfg = paths.home("mira").config
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()),
                               "budget": {"max_doorbell_wakes_per_hour": 2}}))
    proc = start(daemon_env(civ, messages_api), "--all", *IDLE)
    try:
        wait_for(lambda: all(heartbeat(civ, n).get("state") == "sleeping" for n in NAMES))
        for k in (1, 2):
            doorbell.ring(paths.home("mira").doorbell, "REFLECT", f"a peer's report {k}")
            wait_for(lambda k=k: len(logs("mira")) == k)  # type: ignore[misc]
        doorbell.ring(paths.home("mira").doorbell, "REFLECT", "a peer's report 3")
        wait_for(lambda: "citizen mira: 2 doorbell wakes this hour" in proc.output())
        doorbell.ring(paths.home("opus").doorbell, "REFLECT", "a peer's report")
        wait_for(lambda: len(logs("opus")) == 1)
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert len(logs("mira")) == 2 and "REFLECT waits" in out


def test_kill_9_of_the_one_process_loses_no_lock_and_no_count(
        civ: Path, messages_api: MessagesServer) -> None:
    env = daemon_env(civ, messages_api)
    first = start(env, "--all", "--interval", "0.5", "--first-wake", "0")
    wait_for(lambda: all(len(logs(n)) >= 2 for n in NAMES))
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    counted = {n: state.load(paths.home(n))["slots"] for n in NAMES}
    second = start(env, "--all", "--interval", "0.5", "--first-wake", "0")
    try:  # every lock came free with the process: all three are hosted again
        wait_for(lambda: all(heartbeat(civ, n).get("pid") == second.pid for n in NAMES))
        wait_for(lambda: all(state.load(paths.home(n))["slots"] >= counted[n] + 2
                             for n in NAMES))
    finally:
        out = stop(second)
    assert second.returncode == 0, out
    for name in NAMES:  # the slots go on from where they were, none handed out twice
        slots = [w[0]["slot"] for w in logs(name) if w[0].get("slot") is not None]
        assert len(slots) == len(set(slots)), (name, slots)


def test_a_citizen_whose_home_is_broken_is_left_out_and_said(
        civ: Path, messages_api: MessagesServer) -> None:
    """mira's doorbell is a file, not a folder (something broke her files): her start
    fails, she is said in her heartbeat, and opus and aria run in the one process."""
    bell = paths.home("mira").doorbell
    shutil.rmtree(bell, ignore_errors=True)
    bell.write_text("not a folder")
    proc = start(daemon_env(civ, messages_api), "--all", "--interval", "0.5",
                 "--first-wake", "0", "--max-wakes", "4")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "citizen mira: cannot be started: FileExistsError" in out
    assert heartbeat(civ, "mira")["state"] == "failed"
    assert logs("mira") == [] and logs("opus") and logs("aria")
