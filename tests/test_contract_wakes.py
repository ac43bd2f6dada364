"""The contract every wake type keeps: a citizen with nothing to do costs nothing.

Parametrised over every registered wake type (a type another issue registers is
covered the day it lands): with no task, no mail, nothing owed and nothing new, the
wake is idle - zero model calls - and writes nothing but its wake log, whose lines
say so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from citizen.config import paths
from citizen.llm.base import Reply
from citizen.llm.scripted import ScriptedProvider
from citizen.wake import types as wakes
from citizen.wake.flow import run_wake
from shared import clock
from shared.atomic import write_json
from tests.scripts import say


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("wake_type", wakes.registered())
def test_an_idle_wake_calls_no_model_and_writes_only_its_log(civ: Path, wake_type: str) -> None:
    calls: list[object] = []

    def count(request: object) -> Reply:
        calls.append(request)
        return say("nothing to do")

    for peer in ("mira", "aria"):  # healthy peers: cleanly stopped daemons
        write_json(paths.home(peer).heartbeat, {"state": "stopped", "pid": os.getpid(),
                                                "updated": clock.now()})

    provider = ScriptedProvider(default=count)
    before = _files(civ)
    result = run_wake("opus", wake_type=wake_type, provider=lambda c, s: provider)
    after = _files(civ)

    assert result.status == "idle", (wake_type, result.status)
    assert result.calls == 0 and calls == [], f"{wake_type} called the model while idle"
    # The wake counter (state) and the wake's log change; a lock file may appear (empty).
    changed = sorted(k for k in after if before.get(k) != after[k]
                     and not (k.endswith(".lock") and after[k][0] == 0))
    log = result.log_path.relative_to(civ)
    allowed = {str(log), str(paths.home("opus").dir.relative_to(civ) / "state.json")}
    assert set(changed) <= allowed, f"{wake_type} wrote {set(changed) - allowed} while idle"
    events = [json.loads(line) for line in result.log_path.read_text().splitlines()]
    gates = [e for e in events if e["event"] == "gate"]
    assert [g["verdict"] for g in gates] == ["idle"] and gates[0]["reason"], events
    assert not any(e["event"] in ("llm_call", "tool_call") for e in events), events


def test_the_contract_fails_a_wake_with_work(civ: Path) -> None:
    """The check above can fail: a queued task is work, and its wake calls the model."""
    from citizen.home.tasks import TaskQueue

    TaskQueue(paths.home("opus").tasks).add("Say hello", source="test")
    calls: list[object] = []

    def count(request: object) -> Reply:
        calls.append(request)
        return say("hello")

    provider = ScriptedProvider(default=count)
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: provider)
    assert result.status != "idle" and result.calls > 0 and calls
