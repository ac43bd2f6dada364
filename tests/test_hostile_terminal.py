"""What a citizen wrote never drives the operator's terminal (issue 28): escape sequences
in a wake log, a task or a heartbeat are gone from `citizen logs`, `status`, `task list`."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from click.testing import CliRunner

from citizen.cli import cli
from citizen.config import paths
from citizen.home.tasks import TaskQueue

# Retitle the window, clear the screen, set the clipboard (OSC 52), a one-byte CSI, a DCS.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x9b31m\x1bPq#0\x1b\\\r\x08"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _assert_clean(output: str) -> None:
    found = sorted({hex(ord(c)) for c in CONTROL.findall(output)})
    assert not found, f"control characters reached the terminal: {found}\n{output!r}"


def test_escapes_in_a_wake_log_never_reach_the_terminal(civ: Path) -> None:
    home = paths.home("opus")
    log = home.wake_logs / f"{7:06d}-TASK.jsonl"
    events = [
        {"ts": "2026-11-25T10:00:00+00:00", "event": "wake_start", "wake": 7,
         "type": f"TASK{HOSTILE}", "reason": HOSTILE, "pid": 1},
        {"ts": "2026-11-25T10:00:01+00:00", "event": "llm_call", "purpose": HOSTILE,
         "model": HOSTILE, "reply": {"text": f"says {HOSTILE}",
                                     "tool_calls": [{"name": HOSTILE, "input": {"a": HOSTILE}}]}},
        {"ts": "2026-11-25T10:00:02+00:00", "event": "tool_call", "tool": "shell_command",
         "args": {"command": HOSTILE}, "result": f"out {HOSTILE}"},
        {"ts": "2026-11-25T10:00:03+00:00", "event": "error", "error": HOSTILE,
         "traceback": HOSTILE},
        {"ts": "2026-11-25T10:00:04+00:00", "event": f"odd{HOSTILE}", "x": HOSTILE},
        {"ts": "2026-11-25T10:00:05+00:00", "event": "wake_end", "status": f"ok{HOSTILE}",
         "reason": HOSTILE, "cost_usd": 0.0, "calls": 1, "duration_s": 1.0},
    ]
    # json.dumps escapes them (\u001b); read back, they are raw characters again
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    for args in (["logs", "opus", "--wake", "7"], ["logs", "opus"],
                 ["logs", "opus", "--wake", "7", "--json"]):
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 0, out.output
        _assert_clean(out.output)
    assert "out " in CliRunner().invoke(cli, ["logs", "opus", "--wake", "7"]).output


def test_escapes_in_tasks_and_heartbeats_never_reach_the_terminal(civ: Path) -> None:
    home = paths.home("opus")
    tasks = TaskQueue(home.tasks)
    task = tasks.add(f"Write a.md {HOSTILE}")
    claimed = tasks.claim(task.id)
    tasks.finish(claimed, "failed", f"result {HOSTILE}")
    planted = home.tasks / "queue" / "t-\x1b]0;pwned\x07.json"  # a name is the citizen's too
    planted.write_text(json.dumps({**task.to_dict(), "id": planted.stem}))
    home.heartbeat.parent.mkdir(parents=True, exist_ok=True)
    home.heartbeat.write_text(json.dumps({
        "updated": "2099-01-01T00:00:00+00:00", "state": f"sleeping{HOSTILE}",
        "pid": os.getpid(), "next_wake_at": HOSTILE}))
    for args in (["task", "list", "opus"], ["status"]):
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 0, out.output
        _assert_clean(out.output)
