"""Peer monitoring: deterministic checks, findings filed, the peer told, idle when healthy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

import pytest

from citizen.config import paths
from citizen.home.tasks import TaskQueue
from citizen.wake.flow import run_wake
from shared import clock
from shared.atomic import write_json
from shared.monitor import (
    Finding,
    Monitor,
    check_heartbeat,
    check_nonsense,
    check_task,
    check_wakes,
)
from shared.records import AUTHOR
from tests.scripts import Actor, say
from tests.test_records import ME, OTHER, plant


def log(path: Path, wake: int, calls: list[tuple[str, dict[str, str], str]],
        status: str = "ok") -> Path:
    lines = [{"wake": wake, "event": "tool_call", "tool": t, "args": a, "result": r}
             for t, a, r in calls]
    lines.append({"wake": wake, "event": "wake_end", "status": status})
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_a_loop_is_the_same_call_with_the_same_result(tmp_path: Path) -> None:
    same = [log(tmp_path / f"00000{i}-TASK.jsonl", i,
                [("read_file", {"path": "x"}, "same text")]) for i in range(1, 4)]
    (finding,) = check_wakes(same, ("TASK",))
    assert finding.kind == "looping" and "3 wakes" in finding.detail
    polling = [log(tmp_path / f"00001{i}-TASK.jsonl", 10 + i,
                   [("shell_command", {"command": "date"}, f"12:0{i}")]) for i in range(3)]
    assert check_wakes(polling, ("TASK",)) == []  # results change: polling, not a loop


def test_nonsensical_actions_are_repeated_identical_failures_and_imagined_tools(
        tmp_path: Path) -> None:
    def failed(tool: str, args: dict[str, str], result: str) -> dict[str, object]:
        return {"wake": 1, "event": "tool_call", "tool": tool, "args": args, "result": result,
                "error": True}

    path = tmp_path / "000001-TASK.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in [
        *[failed("read_file", {"path": "/nope"}, "error: no such file")] * 3,
        failed("read_file", {"path": "/a"}, "error: no such file"),  # tried, then changed
        failed("read_file", {"path": "/b"}, "error: no such file"),
        failed("teleport", {}, "error: no tool 'teleport' in this wake"),
        failed("fly", {}, "error: no tool 'fly' in this wake")]) + "\n")
    kinds = check_nonsense([path])
    assert [f.kind for f in kinds] == ["nonsensical", "nonsensical"]
    assert "/nope" in kinds[0].detail and "3 times" in kinds[0].detail
    assert "fly, teleport" in kinds[1].detail
    sensible = tmp_path / "000002-TASK.jsonl"
    sensible.write_text("\n".join(json.dumps(e) for e in [
        failed("read_file", {"path": "/a"}, "error: no such file"),
        failed("read_file", {"path": "/b"}, "error: no such file"),
        failed("fly", {}, "error: no tool 'fly' in this wake")]) + "\n")
    assert check_nonsense([sensible]) == []


def test_stalled_progress(tmp_path: Path) -> None:
    logs = [log(tmp_path / f"00000{i}-TASK.jsonl", i, [], status="no_progress")
            for i in range(1, 6)]
    assert [f.kind for f in check_wakes(logs, ("TASK",))] == ["stalled"]
    logs.append(log(tmp_path / "000006-TASK.jsonl", 6, [], status="ok"))
    assert check_wakes(logs, ("TASK",)) == []


def test_heartbeats_and_stuck_tasks(tmp_path: Path) -> None:
    beat = tmp_path / "hb.json"
    assert check_heartbeat(beat)[0].kind == "dead"  # never ran
    write_json(beat, {"pid": os.getpid(), "state": "sleeping",
                      "updated": "2026-01-01T00:00:00+00:00"})
    assert "old" in check_heartbeat(beat)[0].detail
    write_json(beat, {"pid": 2**22 + 7, "state": "sleeping",
                      "updated": "2026-01-01T00:00:00+00:00"})
    assert "gone" in check_heartbeat(beat)[0].detail
    write_json(beat, {"pid": 2**22 + 7, "state": "stopped", "updated": "2026-01-01T00:00:00"})
    assert check_heartbeat(beat) == []  # a clean stop is not a problem
    active = tmp_path / "active"
    active.mkdir()
    task = active / "t-1.json"
    task.write_text("{}")
    assert check_task(active) == []
    os.utime(task, (time.time() - 7 * 3600,) * 2)
    assert check_task(active)[0].kind == "stuck"


def never(*_: object) -> NoReturn:
    raise AssertionError("an idle wake must not build a provider")


def test_peer_monitor_wake_files_findings_and_the_peer_reflects_on_them(civ: Path) -> None:
    for name in ("mira", "aria"):  # healthy peers: recent heartbeats of live processes
        write_json(paths.home(name).heartbeat, {"pid": os.getpid(), "state": "sleeping",
                                                "updated": time.strftime("%Y-%m-%dT%H:%M:%S+00:00",
                                                                         time.gmtime())})
    assert run_wake("opus", wake_type="PEER_MONITOR", provider=never).status == "idle"
    # Now aria's task is stuck for hours.
    tasks = TaskQueue(paths.home("aria").tasks)
    task = tasks.claim(tasks.add("long").id)
    os.utime(paths.home("aria").tasks / "active" / f"{task.id}.json",
             (time.time() - 8 * 3600,) * 2)
    outcomes = {run_wake("opus", wake_type="PEER_MONITOR",
                         provider=lambda c, s: Actor(say("told aria"))).status
                for _ in range(6)}  # the peer is drawn at random: aria comes up
    assert "ok" in outcomes
    reports = list((civ / "shared" / "monitor" / "findings" / "aria").glob("*-opus-*.json"))
    assert reports and json.loads(reports[0].read_text())["findings"][0]["kind"] == "stuck"
    assert list(paths.home("aria").doorbell.glob("*REFLECT.json"))
    reflect = run_wake("aria", wake_type="REFLECT", provider=lambda c, s: Actor(say("noted")))
    assert reflect.status == "ok"
    assert run_wake("aria", wake_type="REFLECT", provider=never).status == "idle"


def test_two_findings_in_one_second_both_survive(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    monkeypatch.setattr(clock, "moment", lambda: frozen)
    (tmp_path / "monitor").mkdir()  # as the commons is made (`citizen init`)
    monitor = Monitor(tmp_path / "monitor" / "findings", enforce_identity=True)
    monitor.file("aria", ME, [Finding("stuck", "first")])
    monitor.file("aria", ME, [Finding("stuck", "second")])
    details = [r["findings"][0]["detail"] for r in monitor.about("aria")]
    assert sorted(details) == ["first", "second"]
    assert all(r[AUTHOR] == ME for r in monitor.about("aria"))


def test_a_finding_in_another_authors_name_is_not_counted(tmp_path: Path) -> None:
    findings = tmp_path / "monitor" / "findings"
    findings.parent.mkdir()
    monitor = Monitor(findings, enforce_identity=True)
    monitor.file("aria", ME, [Finding("stuck", "real")])
    now = clock.now()
    stuck = [{"kind": "stuck", "detail": "forged"}]
    plant(findings / "aria" / f"20990101T000000-{OTHER}.json",
          {"peer": "aria", AUTHOR: OTHER, "ts": now, "findings": stuck})
    plant(findings / "aria" / "20990101T000001-old.json",  # the old format, forged
          {"peer": "aria", "by": OTHER, "ts": now, "findings": stuck})
    plant(findings / "aria" / "20990101T000002-misplaced.json",  # about someone else
          {"peer": "mira", AUTHOR: ME, "ts": now, "findings": stuck})
    plant(findings / "aria" / "20990101T000003-mine.json",  # the old format, genuine
          {"peer": "aria", "by": ME, "ts": now, "findings": [{"kind": "dead", "detail": "old"}]})
    about = monitor.about("aria")
    assert [r["findings"][0]["detail"] for r in about] == ["real", "old"]
    assert [r[AUTHOR] for r in about] == [ME, ME]
    assert monitor.recent("aria") == 2
    assert len(list((findings / "aria").glob("*.json"))) == 5  # nothing removed


def test_what_a_peer_plants_neither_hangs_nor_fills_its_monitor(tmp_path: Path) -> None:
    """PEER_MONITOR reads a peer's heartbeat and wake logs - in the server's scheduler,
    for every citizen. A FIFO at the heartbeat is refused at once (it hung the reader: six
    such gates stopped the scheduler for all); a sparse 3 GB wake log is read from its
    end, within a 2 GB address space (the scheduler's MemoryMax is 1G)."""
    fifo = tmp_path / "mira.json"
    os.mkfifo(fifo)
    failed: list[BaseException] = []

    def read() -> None:
        try:
            check_heartbeat(fifo)
        except OSError as exc:
            failed.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)
    hung = reader.is_alive()
    if hung:  # a writer lets the blocked reader go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not hung and failed
    giant = log(tmp_path / "000009-TASK.jsonl", 9, [("read_file", {"path": "a"}, "x")])
    with giant.open("r+b") as f:
        f.truncate(3 * 2**30)
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2**31, 2**31))\n"
    done = subprocess.run(
        [sys.executable, "-c", limit + "from pathlib import Path\nfrom shared.monitor import "
         f"check_wakes\nprint(check_wakes([Path({str(giant)!r})], ('TASK',)))"],
        capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr[-500:]
