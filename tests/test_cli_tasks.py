"""`citizen task add|list|show|cancel|retry` through the real CLI (click's runner), with
wakes run by a scripted model: the mechanics, never a model's judgement."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from citizen.cli import cli
from citizen.home.tasks import TaskQueue
from citizen.llm.base import Reply, Request
from citizen.wake.flow import run_wake
from tests.scripts import Actor, call, provides, queue

ESCAPES = ("\x1b]0;pwned\x07", "\x1b[2J")


def cli_run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def ok(*args: str) -> str:
    result = cli_run(*args)
    assert result.exit_code == 0, result.output
    return result.output


def rings(civ: Path, name: str = "opus") -> list[Path]:
    return sorted((civ / "shared" / "doorbell" / name).glob("*.json"))


def test_empty_text_is_refused_and_nothing_is_queued(civ: Path) -> None:
    for text in ("", "   \n\t"):
        result = cli_run("task", "add", "opus", text)
        assert result.exit_code == 2, result.output
        assert "the task's text is empty" in result.output
    assert queue().counts()["queue"] == 0
    assert rings(civ) == []


def test_add_says_the_daemon_is_not_running_and_how_to_start_it(civ: Path) -> None:
    out = ok("task", "add", "opus", "Write notes/hello.md")
    assert "within seconds" not in out
    assert "not running" in out
    assert f"--root {civ} run opus" in out  # dev mode: the pasteable `citizen run NAME`


def test_show_prints_the_history_the_wakes_and_the_verification(civ: Path) -> None:
    task = queue().add("Write notes/plan.md with the steps")
    actor = Actor(call("write_file", path="notes/plan.md", content="1. a\n2. b\n"),
                  call("task_complete", summary="notes/plan.md has the steps"))
    result = run_wake("opus", wake_type="TASK", provider=provides(actor))
    assert result.status == "ok", result.reason
    out = ok("task", "show", "opus", task.id)
    assert f"task {task.id} of opus: done" in out
    assert "WHEN" in out and "claimed" in out and "queued" in out
    wakes = out.split("wakes that worked on it:")[1]
    assert f"{result.number:<4}  TASK" in wakes and "claimed, done" in wakes
    assert "file notes/plan.md" in out  # its deliverable
    assert "notes/plan.md: 10 bytes" in out and "verifier: pass" in out  # how it was checked
    facts = json.loads(ok("task", "show", "opus", task.id, "--json"))
    assert facts["state"] == "done"
    assert [w["wake"] for w in facts["wakes"]] == [result.number]
    assert facts["verification"]["deliverables"]["files"] == ["notes/plan.md"]


def test_show_of_an_unknown_id_exits_2_and_says_how_to_list(civ: Path) -> None:
    result = cli_run("task", "show", "opus", "t-nosuch")
    assert result.exit_code == 2
    assert "no task 't-nosuch'" in result.output and "task list opus" in result.output
    for verb in ("cancel", "retry"):
        assert cli_run("task", verb, "opus", "../../etc/passwd").exit_code == 2


def test_a_cancelled_queued_task_is_never_picked_by_the_next_wake(civ: Path) -> None:
    task = queue().add("Write notes/plan.md")
    assert "cancelled" in ok("task", "cancel", "opus", task.id)
    actor = Actor(call("task_complete", summary="done"))
    result = run_wake("opus", wake_type="TASK", provider=provides(actor))
    assert (result.status, actor.requests) == ("idle", [])
    assert queue().where(task.id) == "cancelled"
    assert queue().recover() == [] and queue().where(task.id) == "cancelled"
    again = cli_run("task", "cancel", "opus", task.id)
    assert again.exit_code == 1 and "already finished" in again.output
    status = json.loads(ok("status", "--json"))
    assert next(r for r in status if r["citizen"] == "opus")["tasks"]["cancelled"] == 1


class CancelledMidWake(Actor):
    """Works on the task; while its wake runs, the operator cancels the task."""

    def __init__(self, task_id: str) -> None:
        super().__init__(call("write_file", path="notes/a.md", content="part"),
                         call("write_file", path="notes/b.md", content="more"))
        self.task_id = task_id
        self.output = ""

    def _answer(self, request: Request) -> Reply:
        if request.purpose == "execute" and not self.output:
            self.output = ok("task", "cancel", "opus", self.task_id)
        return super()._answer(request)


def test_cancelling_the_task_a_wake_works_on_ends_the_wake_at_its_next_turn(civ: Path) -> None:
    task = queue().add("Write notes/a.md and notes/b.md")
    actor = CancelledMidWake(task.id)
    result = run_wake("opus", wake_type="TASK", provider=provides(actor))
    assert "asked the wake working on" in actor.output
    assert result.status == "cancelled", result.reason
    assert (civ / "opus" / "notes" / "a.md").exists()  # the turn under way finished
    assert not (civ / "opus" / "notes" / "b.md").exists()  # the next one never ran
    assert queue().where(task.id) == "cancelled"
    assert not (civ / "opus" / "tasks" / "cancel" / f"{task.id}.json").exists()
    assert "cancel_requested" in ok("task", "show", "opus", task.id)


def test_an_active_task_with_no_wake_running_is_cancelled_at_once(civ: Path) -> None:
    tasks = queue()
    task = tasks.claim(tasks.add("Write notes/a.md").id)  # left active between wakes
    assert "cancelled" in ok("task", "cancel", "opus", task.id)
    assert tasks.where(task.id) == "cancelled"
    assert tasks.recover() == [] and tasks.where(task.id) == "cancelled"


def test_retry_puts_a_failed_task_back_and_a_wake_takes_it(civ: Path) -> None:
    task = queue().add("Write notes/plan.md")
    stuck = Actor(call("task_stuck", reason="no idea"))
    run_wake("opus", wake_type="TASK", provider=provides(stuck))
    assert queue().where(task.id) == "failed"
    assert cli_run("task", "retry", "opus", task.id).exit_code == 0
    retried = queue().load("queue", task.id)
    assert (retried.status, retried.attempts, retried.result) == ("queued", 0, "")
    events = [h["event"] for h in retried.history]
    assert events[-2:] == ["stuck", "retried"] and retried.history[-1]["previous_attempts"] == 1
    assert json.loads(rings(civ)[-1].read_text())["wake_type"] == "TASK"
    again = cli_run("task", "retry", "opus", task.id)
    assert again.exit_code == 1 and "queued already" in again.output
    worker = Actor(call("write_file", path="notes/plan.md", content="the plan"),
                   call("task_complete", summary="notes/plan.md written"))
    assert run_wake("opus", wake_type="TASK", provider=provides(worker)).status == "ok"
    assert queue().where(task.id) == "done"
    done = cli_run("task", "retry", "opus", task.id)
    assert done.exit_code == 1 and "it is done" in done.output


def test_list_has_a_header_ages_and_filters_by_state(civ: Path) -> None:
    tasks = queue()
    first, second = tasks.add("Write notes/one.md"), tasks.add("Write notes/two.md")
    ok("task", "cancel", "opus", second.id)
    out = ok("task", "list", "opus")
    assert out.splitlines()[0].split() == ["STATE", "ID", "KIND", "CREATED", "ATTEMPTS",
                                           "TEXT", "/", "RESULT"]
    assert "s ago" in out and first.id in out and second.id in out
    only = ok("task", "list", "opus", "--state", "cancelled")
    assert second.id in only and first.id not in only
    both = ok("task", "list", "opus", "--state", "cancelled", "--state", "queue")
    assert first.id in both and second.id in both
    listed = json.loads(ok("task", "list", "opus", "--state", "queue", "--json"))
    assert [t["id"] for t in listed] == [first.id] and listed[0]["created"].startswith("20")
    assert "no tasks in state failed" in ok("task", "list", "opus", "--state", "failed")
    assert cli_run("task", "list", "opus", "--state", "nosuch").exit_code == 2


def test_escape_sequences_in_a_task_never_reach_the_terminal(civ: Path) -> None:
    task = queue().add(f"Write notes/x.md {ESCAPES[0]} now {ESCAPES[1]}")
    for out in (ok("task", "list", "opus"), ok("task", "show", "opus", task.id)):
        assert "\x1b" not in out and "\x07" not in out
        assert "notes/x.md" in out


def test_a_task_file_the_citizen_broke_is_reported_not_a_traceback(civ: Path) -> None:
    tasks = TaskQueue(civ / "opus" / "tasks")
    task = tasks.add("Write notes/x.md")
    path = civ / "opus" / "tasks" / "queue" / f"{task.id}.json"
    path.write_text("{not json")
    listed = ok("task", "list", "opus")
    assert "unreadable" in listed and task.id in listed
    for verb in ("show", "cancel"):
        result = cli_run("task", verb, "opus", task.id)
        assert result.exit_code == 1 and str(path) in result.output
        assert "Traceback" not in result.output
    assert path.read_text() == "{not json"  # kept as it was
