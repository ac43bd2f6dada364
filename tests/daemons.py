"""Real daemon processes for tests, talking to the local Messages API server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.anthropic_server import API_KEY, MessagesServer, tool_use


def routing(body: dict[str, Any], wanted: Callable[[str], bool]) -> dict[str, Any] | None:
    """The answer to a wake's forced `respond` calls: route to 'fast'; pick the tools that
    `wanted` accepts; no deliverables beyond the rule's; the verifier of a "done"
    passes it; a REVIEW report says "worked" when offered, else "failed"; a verified
    change is adopted. None for any other call."""
    if (body.get("tool_choice") or {}).get("name") != "respond":
        return None
    props = body["tools"][-1]["input_schema"]["properties"]
    if "tier" in props:
        return tool_use("respond", {"tier": "fast"})
    if "verdict" in props:
        return tool_use("respond", {"verdict": "pass", "reason": "the file is there"})
    if "commands" in props:  # the task's deliverables: the rule's files are enough
        return tool_use("respond", {"files": [], "commands": [], "answer": False})
    batched = bool(props) and all(isinstance(v, dict) and "decision" in v.get(
        "properties", {}) for v in props.values())  # the adoption question of several changes
    if "outcome" in props or "decision" in props or batched:
        return tool_use("respond", _review_answer(props))
    return tool_use("respond", {"tools": [t for t in props["tools"]["items"]["enum"]
                                          if wanted(t)]})


def worker(body: dict[str, Any]) -> dict[str, Any]:
    """A model that routes to 'fast', writes a file, then completes the task."""
    answer = routing(body, lambda t: t in ("write_file", "task_complete"))
    if answer is not None:
        return answer
    last = body["messages"][-1]["content"]
    if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
        return tool_use("task_complete", {"summary": "wrote notes/out.md"})
    return tool_use("write_file", {"path": "notes/out.md", "content": "from the daemon"})


def _review_answer(props: dict[str, Any]) -> dict[str, Any]:
    """A REVIEW wake's report after its own test run ("worked" is offered only when the
    tests passed), or its question on a verified change (adopt)."""
    if "decision" in props:
        return {"decision": "adopt", "reason": "it serves my goals"}
    if "outcome" not in props:  # batched: every change by its id
        return {c: {"decision": "adopt", "reason": "it serves my goals"} for c in props}
    worked = "worked" in props["outcome"]["enum"]
    return {"outcome": "worked" if worked else "failed", "note": "read the test run"}


def daemon_env(root: Path, server: MessagesServer) -> dict[str, str]:
    return {**os.environ, "CIV_ROOT": str(root), "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_BASE_URL": server.url}


class Daemon(subprocess.Popen[str]):
    """`citizen run` whose output goes to a file, not a pipe: a pipe nobody drains fills
    at 64 KiB and then blocks the daemon mid-log. `communicate` waits, then reads it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        fd, name = tempfile.mkstemp(prefix="daemon-", suffix=".out")
        self.output_path = Path(name)
        with os.fdopen(fd, "w") as out:  # the child keeps its own copy of the descriptor
            super().__init__(argv, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)

    def communicate(self, input: str | None = None,
                    timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.output(), ""

    def output(self) -> str:
        """Everything the daemon printed so far."""
        return self.output_path.read_text(errors="replace")


def start(env: dict[str, str], name: str = "opus", *args: str) -> Daemon:
    """Start `citizen run NAME` as its own process group (so a test can kill it whole)."""
    return Daemon([sys.executable, "-m", "citizen", "run", name, *args], env)


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout} s")


def heartbeat(root: Path, name: str = "opus") -> dict[str, Any]:
    path = root / "shared" / "monitor" / "heartbeats" / f"{name}.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data


def have_run(names: tuple[str, ...]) -> None:
    """Give each citizen a heartbeat, as if it had run before: the server's scheduler
    gates a citizen itself only once it has (daemon/scheduled.py)."""
    from citizen.config import paths
    from citizen.daemon import status

    for name in names:
        status.beat(paths.home(name), name=name, state=status.State.STOPPED, current="",
                    next_at=None, wakes_run=0)


def cli(env: dict[str, str], *args: str) -> str:
    """Run `citizen ARGS` as an operator would; its stdout (asserts it succeeded)."""
    done = subprocess.run([sys.executable, "-m", "citizen", *args], env=env, text=True,
                          capture_output=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def kill_when_ready(code: str, ready: Path, *args: str) -> None:
    """Run `python -c CODE READY ARGS...` (from the project, as a real process) until it
    creates the file READY - it has reached the moment a test wants to crash it at - then
    SIGKILL it. Fails if it never gets there (at most 60 s)."""
    project = Path(__file__).resolve().parent.parent
    child = subprocess.Popen([sys.executable, "-c", code, str(ready), *args],
                             env={**os.environ, "PYTHONPATH": str(project)})
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # polling a file the child creates
        assert ready.exists(), f"the child never reached {ready.name} (exit {child.poll()})"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
