"""A claim of "done" stands only on a verifier's pass (issue 28): a verifier that cannot
be asked - the model down, an error, no verifier at all - leaves the task open."""

from __future__ import annotations

from pathlib import Path

import pytest

from citizen.config import paths
from citizen.errors import ProviderError
from citizen.home.tasks import TaskQueue
from citizen.llm.base import Reply, Request
from citizen.tools import ToolFailure, core_tools
from citizen.wake.flow import run_wake
from tests.scripts import Actor, call, tool_env


class DownVerifier(Actor):
    """Does the work; the verifier's model is down."""

    def _answer(self, request: Request) -> Reply:
        if request.purpose == "verify_task":
            raise ProviderError("the fast model is down")
        return super()._answer(request)


def test_a_verifier_that_fails_leaves_the_task_open(civ: Path) -> None:
    tasks = TaskQueue(paths.home("opus").tasks)
    task = tasks.add("Write notes/hello.txt")
    actor = DownVerifier(call("write_file", path="notes/hello.txt", content="hello"),
                         call("task_complete", summary="wrote notes/hello.txt"))
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert "verify_task" in actor.purposes()
    assert tasks.where(task.id) == "active"  # never "done (unverified)"
    notes = [h.get("note", "") for h in tasks.load("active", task.id).history]
    assert any("not verified yet" in n and "the fast model is down" in n for n in notes)
    # once the verifier can be asked, the same claim is judged and filed
    believer = Actor(call("task_complete", summary="wrote notes/hello.txt"))
    run_wake("opus", wake_type="TASK", provider=lambda c, s: believer)
    assert "- verifier: pass" in tasks.load("done", task.id).result


def test_without_a_verifier_nothing_is_filed_done(civ: Path) -> None:
    tasks = TaskQueue(paths.home("opus").tasks)
    task = tasks.add("Write notes/a.md")
    (paths.home("opus").dir / "notes" / "a.md").parent.mkdir(exist_ok=True)
    (paths.home("opus").dir / "notes" / "a.md").write_text("text")
    env = tool_env("opus")
    env.task = tasks.claim(task.id)
    with pytest.raises(ToolFailure, match="verifier could not be asked"):
        core_tools()["task_complete"].run(env, {"summary": "wrote notes/a.md"})
    assert env.task_outcome is None
