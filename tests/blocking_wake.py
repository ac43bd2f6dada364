"""A real TASK wake of opus whose scripted model waits for the test's files, for tests
that watch a wake in progress (`citizen logs --follow`, the dashboard's live tail).
Run as a child process, from the project directory with the civilization's CIV_ROOT:

    python -m tests.blocking_wake GATES NAME=LEFT [NAME=LEFT ...]

The model writes notes/a.md, then completes the task. Before it answers while LEFT of
its two pieces of work are left (2: before anything, 1: after write_file), it waits
until the file GATES/NAME exists (at most DEADLINE_S). Prints the wake's status and why.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from citizen.config import paths
from citizen.home.tasks import TaskQueue
from citizen.llm.base import Reply
from citizen.wake.flow import run_wake
from tests.scripts import Actor, call

DEADLINE_S = 120.0  # a test that never creates the file fails, it does not hang


class Blocking(Actor):
    """An actor that waits at the gates before its answers."""

    def __init__(self, gates: dict[int, Path], *work: Any) -> None:
        super().__init__(*work)
        self.gates = gates

    def _answer(self, request: Any) -> Reply:
        gate = self.gates.get(len(self.work)) if request.purpose == "execute" else None
        deadline = time.monotonic() + DEADLINE_S
        while gate is not None and not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # polling a file the test creates when it is ready
        return super()._answer(request)


def main(argv: list[str]) -> None:
    folder = Path(argv[0])
    gates = {int(left): folder / name for name, left in (a.split("=") for a in argv[1:])}
    TaskQueue(paths.home("opus").tasks).add("Write notes/a.md saying a")
    actor = Blocking(gates, call("write_file", path="notes/a.md", content="a"),
                     call("task_complete", summary="notes/a.md says a"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    print(result.status, result.reason)


if __name__ == "__main__":
    main(sys.argv[1:])
