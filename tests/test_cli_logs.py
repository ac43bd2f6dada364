"""`citizen logs` and `status` for a person at a terminal (issue 31): a live tail of the wake
in progress, the model that answered each call, calls outside wakes kept out of the wake
counts, tables with headers within 120 columns, and no escape sequence a model or a mail
wrote reaching the terminal."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO

import pytest
from click.testing import CliRunner

from citizen.cli import cli
from citizen.config import paths
from citizen.home import spend, wakelog
from citizen.home.tasks import TaskQueue
from citizen.llm.base import Reply, Request, Usage
from citizen.llm.scripted import ScriptedProvider
from citizen.wake.flow import call_outside_wake, run_wake
from tests.scripts import AT_A_TERMINAL, Actor, call

DEADLINE_S = 60.0
HOSTILE = "\x1b]0;pwned\x07\x1b]52;c;Zm9v\x07\x1b[2J"

# The wake in progress: tests/blocking_wake.py (its model waits for the test's files).


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _reader(stream: IO[str]) -> queue.Queue[str]:
    """The lines of `stream` as they come, on a queue (a thread blocks on the pipe)."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _until(lines: queue.Queue[str], wanted: str, seen: list[str]) -> str:
    """Read lines until one contains `wanted` (or fail at the deadline, with what came)."""
    end = time.monotonic() + DEADLINE_S
    while (left := end - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        seen.append(line)
        if wanted in line:
            return line
    raise AssertionError(f"{wanted!r} not printed within {DEADLINE_S} s:\n{''.join(seen)}")


def _env() -> dict[str, str]:
    project = str(paths.project_dir())
    return {**os.environ, "PYTHONPATH": project, "PYTHONUNBUFFERED": "1"}


def test_follow_prints_a_tool_call_of_the_wake_in_progress(civ: Path, tmp_path: Path) -> None:
    release = tmp_path / "release"
    env = _env()
    wake = subprocess.Popen([sys.executable, "-m", "tests.blocking_wake", str(tmp_path),
                             "release=1"], env=env, cwd=paths.project_dir(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    follow = subprocess.Popen([*AT_A_TERMINAL, sys.executable, "-m", "citizen", "logs", "opus",
                               "--follow"], env=env, cwd=paths.project_dir(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        lines, seen = _reader(follow.stdout), list[str]()
        _until(lines, "tool write_file", seen)
        # Printed while the wake is still waiting for its model: it has not ended.
        assert wake.poll() is None
        (log,) = wakelog.wake_logs(paths.home("opus"))
        assert wakelog.summary(log)["status"] == "running"
        release.touch()
        _until(lines, "wake ended: ok", seen)
        out, err = wake.communicate(timeout=DEADLINE_S)
        assert wake.returncode == 0 and out.startswith("ok"), err
        follow.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = follow.communicate(timeout=DEADLINE_S)
        assert follow.returncode == 0, err
        assert "Traceback" not in err
    finally:
        for proc in (wake, follow):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_follow_reads_a_log_being_appended_and_waits_for_a_torn_line(civ: Path) -> None:
    """A line written in two pieces is printed once it is whole, never as garbage."""
    log = paths.home("mira").wake_logs / f"{3:06d}-TASK.jsonl"
    start = {"ts": "2026-11-25T10:00:00+00:00", "event": "wake_start", "wake": 3,
             "type": "TASK", "reason": "requested", "pid": 1}
    log.write_text(json.dumps(start) + "\n")
    follow = subprocess.Popen([*AT_A_TERMINAL, sys.executable, "-m", "citizen", "logs", "mira",
                               "-f"], env=_env(), cwd=paths.project_dir(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        lines, seen = _reader(follow.stdout), list[str]()
        _until(lines, "wake 3 TASK started", seen)
        tool = json.dumps({"ts": "2026-11-25T10:00:01+00:00", "event": "tool_call",
                           "wake": 3, "tool": "read_file", "args": {"path": "a.md"},
                           "result": "a"}) + "\n"
        with log.open("a") as fh:
            fh.write(tool[:30])
            fh.flush()
            time.sleep(0.6)  # a torn line stands across polls (the thing tested, not a wait)
            fh.write(tool[30:])
        _until(lines, "tool read_file", seen)
        with log.open("a") as fh:
            fh.write(json.dumps({"ts": "2026-11-25T10:00:02+00:00", "event": "wake_end",
                                 "status": "ok", "reason": "", "cost_usd": 0.0, "calls": 0,
                                 "duration_s": 2.0}) + "\n")
        _until(lines, "wake ended: ok", seen)
        assert not any("tool_call:" in s for s in seen), seen  # never a half line
    finally:
        follow.send_signal(signal.SIGINT)
        follow.communicate(timeout=DEADLINE_S)
    assert follow.returncode == 0


def test_the_transcript_names_the_model_that_answered(civ: Path) -> None:
    """A wake routed to the primary seat (claude-opus-4-6) but answered by the embedded
    model shows the embedded model on each call; the deliverables and the verdict too."""
    TaskQueue(paths.home("opus").tasks).add("Write notes/a.md saying a")
    actor = Actor(call("write_file", path="notes/a.md", content="a"),
                  call("task_complete", summary="notes/a.md says a"), tier="primary")
    embedded = ScriptedProvider(default=lambda r: replace(actor.complete(r),
                                                          model="gemma-3-270m-q4_k_m"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: embedded)
    assert result.status == "ok", result.reason
    calls = [e for e in wakelog.read(result.log_path) if e["event"] == "llm_call"]
    assert {e["model"] for e in calls} == {"gemma-3-270m-q4_k_m"}
    assert any(e.get("route_model") == "claude-opus-4-6" for e in calls)
    out = invoke("logs", "opus", "--wake", str(result.number))
    assert "gemma-3-270m-q4_k_m (route: claude-opus-4-6)" in out
    assert "deliverables recorded: files notes/a.md; commands none" in out
    assert "verification: pass - scripted pass" in out
    assert " done: notes/a.md says a" in out and "- verifier: pass - scripted pass" in out


def test_ask_and_doctor_are_not_wakes_but_their_money_counts(civ: Path) -> None:
    home = paths.home("opus")
    reply = Reply(text="hi", model="scripted", provider="scripted", usage=Usage(10, 2),
                  cost_usd=0.25)
    for kind in ("ASK", "DOCTOR"):
        call_outside_wake("opus", kind, ScriptedProvider([reply]),
                          Request(messages=[{"role": "user", "content": "hi"}],
                                  purpose=kind.lower()))
    result = run_wake("opus", wake_type="REFLECT")
    assert wakelog.wake_logs(home) == [result.log_path]
    table = invoke("logs", "opus")
    assert "ASK" not in table and "DOCTOR" not in table and "REFLECT" in table
    status = json.loads(invoke("status", "--json"))
    opus = next(r for r in status if r["citizen"] == "opus")
    assert opus["wakes_today"] == 1
    assert opus["last_wake"]["type"] == "REFLECT"
    assert opus["usd_today"] == spend.spent(home, spend.today()) == 0.5
    # Their transcripts stay readable by number.
    assert "wake ended: ok" in invoke("logs", "opus", "--wake", "1")


def _hostile_wake(name: str = "opus") -> None:
    """A wake log whose model said, and whose summary carries, escape sequences."""
    log = paths.home(name).wake_logs / f"{4:06d}-TASK.jsonl"
    events = [
        {"ts": "2026-11-25T10:00:00+00:00", "event": "wake_start", "wake": 4, "type": "TASK",
         "reason": "requested", "pid": 1},
        {"ts": "2026-11-25T10:00:01+00:00", "event": "llm_call", "purpose": "execute",
         "model": "m", "reply": {"text": f"I did it {HOSTILE}", "tool_calls": []}},
        {"ts": "2026-11-25T10:00:02+00:00", "event": "task", "id": "t-1",
         "transition": "done", "summary": f"done {HOSTILE}"},
        {"ts": "2026-11-25T10:00:05+00:00", "event": "wake_end", "status": "ok",
         "reason": f"summary {HOSTILE} " + "x" * 300, "cost_usd": 0.0, "calls": 1,
         "duration_s": 1.0},
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))


def _no_escapes(output: str) -> None:
    for piece in ("\x1b", "\x07", "pwned\x07", "]52;"):
        assert piece not in output, repr(output)


def test_status_and_logs_are_tables_within_120_columns_without_escapes(civ: Path) -> None:
    _hostile_wake()
    TaskQueue(paths.home("opus").tasks).add(f"Write a.md {HOSTILE} " + "y" * 200)
    for args in (("logs", "opus"), ("logs", "opus", "--wake", "4"), ("status",)):
        _no_escapes(invoke(*args))
    table = invoke("logs", "opus").splitlines()
    assert table[0].split() == ["WAKE", "TYPE", "STARTED", "STATUS", "COST", "CALLS", "TIME",
                                "WHY"]
    assert "ago" in table[1] and "2026-11-25" not in table[1]  # an age; ISO in --json
    assert json.loads(invoke("logs", "opus", "--json"))["started"] == "2026-11-25T10:00:00+00:00"
    status = invoke("status").splitlines()
    assert status[0].startswith("CITIZEN") and len(status) >= 4
    assert all(len(line) <= 120 for line in status), status
    assert all(len(line) <= 120 for line in table), table
    assert any(len(line) > 120 for line in invoke("logs", "opus", "--wide").splitlines())
    assert "I did it" in invoke("logs", "opus", "--wake", "4")


def test_a_mail_subject_reaches_the_quarantine_listing_clean(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from citizen.mail import link

    rows = [{"ts": "2026-11-25T10:00:00+00:00", "from": f"eve@x {HOSTILE}",
             "subject": f"Invoice {HOSTILE}", "reason": f"stranger {HOSTILE}",
             "message_id": f"<1@x>{HOSTILE}"}]
    monkeypatch.setattr(link, "quarantined", lambda name: rows)
    out = invoke("mail", "quarantine", "opus")
    _no_escapes(out)
    assert out.splitlines()[0].split()[:3] == ["WHEN", "FROM", "SUBJECT"]
    assert "Invoice" in out and "stranger" in out
    assert json.loads(invoke("mail", "quarantine", "opus", "--json")) == rows
