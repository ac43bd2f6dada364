"""kill -9 at random moments: every file stays whole, no task is lost or run twice at once."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import psutil

from citizen.config import paths
from citizen.home.tasks import STATES, TaskQueue
from tests.anthropic_server import MessagesServer
from tests.daemons import daemon_env, start, wait_for, worker

KILLS = 50
TASKS = 40


def check_invariants(home: Path, expected: set[str]) -> Counter[str]:
    """Every state file parses; every task is in exactly one state directory."""
    for path in home.rglob("*.json"):
        if path.name.startswith("."):
            continue  # a temp file a killed writer left; never read as state
        if "emergency" in path.parts:
            continue
        json.loads(path.read_bytes())  # raises on a partial or corrupt file
    seen: Counter[str] = Counter()
    placed: Counter[str] = Counter()
    for state in STATES:
        for path in (home / "tasks" / state).glob("t-*.json"):
            seen[path.stem] += 1
            placed[state] += 1
    assert set(seen) == expected, "a task was lost or invented"
    assert max(seen.values()) == 1, f"a task is in two places: {seen.most_common(1)}"
    assert placed["active"] <= 1, "more than one active task"
    return placed


def _wakes(pid: int) -> list[psutil.Process]:
    """The daemon's wake process (not the dev-mode broker, which outlives it by design)."""
    wakes = []
    try:
        for child in psutil.Process(pid).children():
            if child.cmdline()[1:4] == ["-m", "citizen", "wake"]:
                wakes.append(child)
    except psutil.Error:  # exited meanwhile
        pass
    return wakes


def _wait_gone(procs: list[psutil.Process]) -> None:
    wait_for(lambda: not any(p.is_running() for p in procs))


def test_random_kill_9s(civ: Path, messages_api: MessagesServer) -> None:
    messages_api.responder = worker
    env = daemon_env(civ, messages_api)
    home = paths.home("opus")
    tasks = TaskQueue(home.tasks)
    expected = {tasks.add(f"task {i}").id for i in range(TASKS)}
    rng = random.Random(20261122)
    for _ in range(KILLS):
        proc = start(env, "opus", "--interval", "0.1", "--first-wake", "0")
        time.sleep(rng.uniform(0.05, 3.5))  # a wake needs ≈2.5 s: the SDK import alone is 2 s
        wakes = _wakes(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)  # the daemon; its wake dies with it (PDEATHSIG)
        proc.wait()
        _wait_gone(wakes)  # before looking: a wake still dying could move a task meanwhile
        check_invariants(home.dir, expected)
    # A last, clean run until a task is done (the kills come every 0.05-3.5 s and a task
    # wake takes about 2.5 s on an idle machine: on a loaded one none may finish between
    # them): the interrupted task went back to the queue exactly once, and work goes on.
    proc = start(env, "opus", "--interval", "0.1", "--first-wake", "0")
    try:
        wait_for(lambda: any((home.dir / "tasks" / "done").glob("t-*.json")), timeout=240)
    finally:
        proc.send_signal(signal.SIGTERM)  # the first: the current wake finishes
        proc.communicate(timeout=120)
    placed = check_invariants(home.dir, expected)
    assert placed["done"] > 0, "no task got done after the kills"
    for task_id in tasks.ids("done"):
        task = tasks.load("done", task_id)
        claims = sum(1 for h in task.history if h["event"] == "claimed")
        requeues = sum(1 for h in task.history if h["event"].startswith("requeued"))
        assert claims == requeues + 1  # every retry follows a recorded interruption
