"""A task's life in the wake flow with a scripted model: carried across wakes, and done
only when what it names exists, passes and is answered (a verifier's second opinion)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from citizen.cli.demo import _summary
from citizen.wake.flow import run_wake
from tests.scripts import Actor, call, events, queue, say


def test_a_task_that_continues_sees_what_its_earlier_wakes_did(civ: Path) -> None:
    """Wake 1 writes part of the work, notes its progress and stops; its working state
    (the notes, the files written, the last results) is in the `working` context, which
    wake 2's calls carry; when the task is filed the context is cleared. The old wake
    showed only the task's text and never wrote `working`, so the work started over."""
    task = queue().add("Write report.md in two parts")
    first = Actor(call("write_file", path="report.md", content="Part one."),
                  call("task_progress", note="part one is in report.md"),
                  say("I will write part two next wake"))
    assert run_wake("opus", wake_type="TASK", provider=lambda c, s: first).status == "ok"
    assert queue().where(task.id) == "active"
    saved = json.loads((civ / "opus" / "contexts" / "working.json").read_text())
    held = json.dumps(saved["entries"])
    assert task.id in held and "part one is in report.md" in held and "report.md" in held
    second = Actor(call("append_file", path="report.md", content=" Part two."),
                   call("task_complete", summary="report.md has both parts"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: second)
    assert result.status == "ok", result.reason
    execute = next(r for r in second.requests if r.purpose == "execute")
    system = json.dumps(execute.system)
    assert "## working" in system
    assert "part one is in report.md" in system
    assert "I will write part two next wake" in system
    assert "Files you have written for it: report.md" in system
    assert "write_file(path='report.md'" in system
    assert (civ / "opus" / "report.md").read_text() == "Part one. Part two."
    saved = json.loads((civ / "opus" / "contexts" / "working.json").read_text())
    assert saved["entries"] == [], "the working state outlived its task"


def test_a_wake_killed_after_a_progress_note_loses_nothing(civ: Path) -> None:
    """A kill -9 after task_progress never saves the contexts, but the note is in the
    task's own file at once, and the next wake rebuilds `working` from it."""
    tasks = queue()
    task = tasks.claim(tasks.add("Write report.md in two parts").id)
    tasks.progress(task, "outline decided: intro, body")  # then the wake is killed
    actor = Actor(say("carrying on"))
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    execute = next(r for r in actor.requests if r.purpose == "execute")
    assert "outline decided: intro, body" in json.dumps(execute.system)


def test_done_without_the_named_file_is_refused_then_failed(civ: Path) -> None:
    """The demo's false "done": the task names a file, the worker claims done without
    it. Each claim is refused with what is missing; after three the task is `failed`
    with the reason - never `done`."""
    task = queue().add("Write notes/plan.md with the three steps")
    actor = Actor(*[call("task_complete", summary="done: finish") for _ in range(3)])
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    assert queue().ids("done") == []
    failed = queue().load("failed", task.id)
    assert "notes/plan.md does not exist" in failed.result and "claimed done 3" in failed.result
    refusals = [c for c in events(result.log_path, "tool_call") if c["error"]]
    assert len(refusals) == 2 and "not done: notes/plan.md" in refusals[0]["result"]


def test_a_refused_claim_can_still_be_made_good(civ: Path) -> None:
    task = queue().add("Write notes/plan.md with the three steps")
    actor = Actor(call("task_complete", summary="done"),
                  call("write_file", path="notes/plan.md", content="1. a\n2. b\n3. c\n"),
                  call("task_complete", summary="notes/plan.md has the steps"))
    assert run_wake("opus", wake_type="TASK", provider=lambda c, s: actor).status == "ok"
    assert "notes/plan.md: 15 bytes" in queue().load("done", task.id).result


def test_an_empty_deliverable_is_not_done(civ: Path) -> None:
    task = queue().add("Write summary.txt")
    actor = Actor(call("write_file", path="summary.txt", content="  \n"),
                  *[call("task_complete", summary="written") for _ in range(3)])
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert "summary.txt is empty" in queue().load("failed", task.id).result


def test_the_demo_summary_shows_what_was_produced_not_what_was_claimed(
        civ: Path, capsys: pytest.CaptureFixture[str]) -> None:
    made = queue().add("Write notes/plan.md with three steps")
    missing = queue().add("Write notes/poem.md")
    actor = Actor(call("write_file", path="notes/plan.md", content="1\n2\n3\n"),
                  call("task_complete", summary="plan written"))
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    liar = Actor(*[call("task_complete", summary="done: finish") for _ in range(3)])
    run_wake("opus", wake_type="TASK", provider=lambda c, s: liar)
    _summary(civ)
    out = capsys.readouterr().out
    assert f"{made.id} done: notes/plan.md: 6 bytes" in out
    assert f"{missing.id} failed: notes/poem.md does not exist" in out
    assert "why: claimed done 3 times" in out


def test_a_verifier_who_did_not_do_the_work_can_refuse_done(civ: Path) -> None:
    """The file exists, but a second opinion - a fast-tier call that sees only the task,
    the summary and the file, never the worker's conversation - says it is not what was
    asked: the claim is refused with that reason, and its verdict is in the result."""
    task = queue().add("Write notes/poem.md, a poem about persistence")
    doubter = Actor(call("write_file", path="notes/poem.md", content="TODO"),
                    call("task_complete", summary="poem written"), verdict="fail")
    run_wake("opus", wake_type="TASK", provider=lambda c, s: doubter)
    asked = [r for r in doubter.requests if r.purpose == "verify_task"]
    assert asked and "TODO" in asked[0].messages[0]["content"]
    assert all("Write notes/poem.md" not in str(r.system) for r in asked)  # not the worker's
    assert queue().where(task.id) == "active"  # refused: the worker may still do it
    believer = Actor(call("write_file", path="notes/poem.md", content="Drops wear stone."),
                     call("task_complete", summary="poem written"))
    run_wake("opus", wake_type="TASK", provider=lambda c, s: believer)
    result = queue().load("done", task.id).result
    assert "- verifier: pass - scripted pass" in result


FAILING_CALC = {"proj/calc.py": "def add(a, b):\n    return a - b\n",
                "proj/test_calc.py": "import unittest\nfrom calc import add\n\n\n"
                                     "class T(unittest.TestCase):\n"
                                     "    def test_add(self):\n"
                                     "        self.assertEqual(add(2, 2), 4)\n"}


def test_a_command_the_task_names_must_pass_before_done(civ: Path) -> None:
    """"Make `python3 -m unittest` pass in proj/": the claim is refused while the
    command fails (with its output), and accepted once it exits 0, quoting the exit."""
    for name, text in FAILING_CALC.items():
        (civ / "opus" / name).parent.mkdir(parents=True, exist_ok=True)
        (civ / "opus" / name).write_text(text)
    task = queue().add("Make `python3 -m unittest` pass in proj/.")
    read = {"files": [], "commands": [{"run": "python3 -m unittest", "cwd": "proj"}],
            "answer": False}
    actor = Actor(call("task_complete", summary="fixed"),
                  call("str_replace_file", path="proj/calc.py", old="a - b", new="a + b"),
                  call("task_complete", summary="calc.add adds now"), deliverables=read)
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    refusal = next(c for c in events(result.log_path, "tool_call") if c["error"])["result"]
    assert "`python3 -m unittest` in proj exits 1" in refusal and "0 != 4" in refusal
    kept = queue().load("done", task.id)
    assert kept.meta["deliverables"]["commands"] == read["commands"]
    assert "- `python3 -m unittest` in proj: exit 0" in kept.result


def test_the_model_that_reads_the_task_cannot_add_a_command_or_drop_a_file(civ: Path) -> None:
    """The deliverables are read by the citizen's own (possibly hostile) model: a
    command the task does not quote is never run, and a file the task names stays."""
    (civ / "opus" / "pwned").unlink(missing_ok=True)
    task = queue().add("Write notes/plan.md with three steps.")
    read = {"files": [], "commands": [{"run": "touch pwned", "cwd": ""}], "answer": False}
    actor = Actor(*[call("task_complete", summary="done") for _ in range(3)],
                  deliverables=read)
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    failed = queue().load("failed", task.id)
    assert failed.meta["deliverables"]["files"] == ["notes/plan.md"]
    assert failed.meta["deliverables"]["commands"] == []
    assert not (civ / "opus" / "pwned").exists()


def test_a_question_is_done_only_with_an_answer(civ: Path) -> None:
    (civ / "opus" / "facts.txt").write_text("The meeting is in Lisbon.\n")
    task = queue().add("Which city is named in facts.txt?")
    actor = Actor(call("task_complete", summary="done"),
                  call("task_complete", summary="The city is Lisbon."))
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    refusal = [r for r in actor.requests if r.purpose == "execute"][1]
    assert "the task asks a question" in json.dumps(refusal.messages)
    assert queue().load("done", task.id).result.startswith("The city is Lisbon.")
