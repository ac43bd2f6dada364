"""The wake flow with a scripted model: gate, tools, limits, logs, crash safety, replay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from citizen import config
from citizen.cli.demo import _summary
from citizen.config import paths
from citizen.home import wakelog
from citizen.home.tasks import TaskQueue
from citizen.llm.base import Reply, Request
from citizen.llm.replay import ReplayProvider
from citizen.wake.flow import WakeRefused, run_wake
from tests.scripts import Actor, call, say


def queue(name: str = "opus") -> TaskQueue:
    return TaskQueue(paths.home(name).tasks)


def events(result_path: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in wakelog.read(result_path) if e["event"] == kind]


def never(*_: object) -> Actor:
    raise AssertionError("an idle wake must not even build a provider")


def test_a_task_is_carried_out_and_lands_in_done(civ: Path) -> None:
    task = queue().add("Write hello.txt")
    actor = Actor(call("write_file", path="notes/hello.txt", content="hello"),
                  call("task_complete", summary="wrote notes/hello.txt"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    assert (civ / "opus" / "notes" / "hello.txt").read_text() == "hello"
    assert queue().ids("done") == [task.id]
    done = queue().load("done", task.id).result
    assert done.startswith("wrote notes/hello.txt\n\nEvidence (checked):")
    assert "- notes/hello.txt: 5 bytes, sha256 2cf24dba5fb0" in done
    kinds = [e["event"] for e in wakelog.read(result.log_path)]
    for expected in ("wake_start", "gate", "contexts", "tools_chosen", "route", "llm_call",
                     "tool_call", "task", "contexts_saved", "wake_end"):
        assert expected in kinds
    end = events(result.log_path, "wake_end")[0]
    # the deliverables read, select, route, two turns, and the verifier of "done"
    assert end["calls"] == 6 and end["status"] == "ok"


@pytest.mark.parametrize("wake_type", ["TASK", "CODE", "REFLECT"])
def test_idle_wakes_make_zero_model_calls(civ: Path, wake_type: str) -> None:
    result = run_wake("opus", wake_type=wake_type, provider=never)
    assert (result.status, result.calls, result.cost_usd) == ("idle", 0, 0.0)
    assert events(result.log_path, "gate")[0]["verdict"] == "idle"
    assert not events(result.log_path, "llm_call")


def test_types_of_later_issues_are_skipped_with_a_reason(civ: Path) -> None:
    result = run_wake("opus", wake_type="SOMEDAY", provider=never)
    assert result.status == "skipped"
    assert "SOMEDAY is not available yet" in result.reason and "DEBATE" in result.reason


def test_scheduled_wakes_follow_the_slots_across_calls(civ: Path) -> None:
    types = [run_wake("mira", provider=never).wake_type for _ in range(10)]
    slots = config.templates().wake_slots("mira")
    assert types == [slots[i] for i in range(10)]
    assert json.loads((civ / "mira" / "state.json").read_text())["slots"] == 10


def test_budget_is_enforced_before_the_call(civ: Path) -> None:
    cfg = civ / "opus" / "config.json"
    data = json.loads(cfg.read_text())
    data["budget"] = {"max_usd_per_wake": 0.02, "max_output_tokens": 1000}
    cfg.write_text(json.dumps(data))
    queue().add("expensive")
    opus_price = config.templates().prices["claude-opus-4-6"]
    actor = Actor(call("task_progress", cost=0.015, note="one"),
                  call("task_progress", cost=0.015, note="two"), price=opus_price)
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    # Opus's primary model costs $25/M output: 1000 tokens could cost $0.025 > $0.02 left.
    assert result.status == "budget"
    assert actor.purposes() == ["task_deliverables", "select_tools", "route"]  # no work call
    (failed,) = queue().ids("failed")
    assert "ran out of budget" in queue().load("failed", failed).result


def test_iteration_cap(civ: Path) -> None:
    cfg = civ / "opus" / "config.json"
    data = json.loads(cfg.read_text())
    data["budget"] = {"max_iterations": 4}
    cfg.write_text(json.dumps(data))
    queue().add("endless")
    actor = Actor(*[call("task_progress", note=f"step {i}") for i in range(10)])
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "iterations"
    assert actor.purposes().count("execute") == 4
    assert "hit the iteration cap" in queue().load("failed", queue().ids("failed")[0]).result


def test_a_read_after_an_edit_sees_the_edit(civ: Path) -> None:
    """What a real agent does: read, edit, read again - the second read is fresh (the old
    loop cached every call for the whole wake and answered it with the text before the
    edit); a read repeated with nothing in between is answered from the cache."""
    (civ / "opus" / "notes.md").write_text("one\n")
    queue().add("edit notes.md")
    actor = Actor(call("read_file", path="notes.md"), call("read_file", path="notes.md"),
                  call("str_replace_file", path="notes.md", old="one", new="two"),
                  call("read_file", path="notes.md"),
                  call("task_complete", summary="edited"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    reads = [c for c in events(result.log_path, "tool_call") if c["tool"] == "read_file"]
    assert [(c["result"], c["cached"]) for c in reads] == [
        ("one\n", False), ("one\n", True), ("two\n", False)]


def test_tests_rerun_after_a_fix_see_the_fix_and_are_progress(civ: Path) -> None:
    """pytest, fix, pytest, fix, pytest: each run is real (never cached), and the same
    failing run repeated around edits is progress, not a loop."""
    (civ / "opus" / "check.sh").write_text("grep -q fixed state.txt && echo PASS || echo FAIL\n")
    (civ / "opus" / "state.txt").write_text("broken\n")
    queue().add("make check.sh pass")
    run_check = call("shell_command", command="bash check.sh")
    actor = Actor(run_check, call("write_file", path="state.txt", content="still broken"),
                  run_check, call("write_file", path="other.txt", content="x"), run_check,
                  call("write_file", path="state.txt", content="fixed"), run_check,
                  call("task_complete", summary="check passes"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    runs = [c for c in events(result.log_path, "tool_call") if c["tool"] == "shell_command"]
    assert [("PASS" in c["result"], c["cached"]) for c in runs] == [
        (False, False), (False, False), (False, False), (True, False)]
    assert not events(result.log_path, "breaker")


def test_polling_with_a_changing_result_is_progress(civ: Path) -> None:
    queue().add("poll")
    actor = Actor(*[call("shell_command", command="date +%N") for _ in range(5)],
                  call("task_complete", summary="polled"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    runs = events(result.log_path, "tool_call")
    assert len({c["result"] for c in runs if c["tool"] == "shell_command"}) == 5


def test_the_same_call_with_the_same_result_and_nothing_changed_is_a_loop(civ: Path) -> None:
    queue().add("loop")
    actor = Actor(*[call("shell_command", command="echo same") for _ in range(5)])
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "no_progress"
    runs = events(result.log_path, "tool_call")
    assert [c["cached"] for c in runs] == [False, False, False]  # each one really ran
    assert events(result.log_path, "breaker")[0]["repeats"] == 3
    assert "nothing changed in between" in result.reason


def test_tool_errors_are_observations(civ: Path) -> None:
    queue().add("read a missing file")
    actor = Actor(call("read_file", path="nope.txt"),
                  call("task_complete", summary="it was missing"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok"
    last_turn = [r for r in actor.requests if r.purpose == "execute"][-1]
    observed = last_turn.messages[-1]["content"][0]
    assert observed["is_error"] is True and "no such file" in observed["content"]


def test_a_corrupt_context_fails_the_wake_and_is_kept(civ: Path) -> None:
    queue().add("anything")
    bad = civ / "opus" / "contexts" / "goals.json"
    bad.write_text("{nope")
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: Actor())
    assert result.status == "failed" and "goals.json" in result.reason
    assert bad.read_text() == "{nope"
    assert queue().ids("queue")  # the task was not touched


def test_contexts_survive_a_failed_save_in_an_emergency_dump(civ: Path) -> None:
    queue().add("break the history file")

    class Breaker(Actor):
        """A real fault mid-wake: history.json becomes unwritable (a directory). (Shell
        commands can no longer do this: the sandbox hides the contexts from them.)"""

        def _answer(self, request: Request) -> Reply:
            history = paths.home("opus").contexts / "history.json"
            if request.purpose not in ("route", "select_tools") and history.is_file():
                history.unlink()
                history.mkdir()
            return super()._answer(request)

    actor = Breaker(call("task_complete", summary="done"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    (dump_event,) = events(result.log_path, "contexts_emergency_dump")
    dump = json.loads(Path(dump_event["path"]).read_text())
    assert any("break the history file" in e["text"]
               for e in dump["contexts"]["history"]["entries"])


def test_secrets_never_reach_tools(civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-very-secret")
    monkeypatch.setenv("EMAIL_PASS", "hunter2")
    queue().add("print the environment")
    actor = Actor(call("shell_command", command="env"), call("task_complete", summary="ok"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert events(result.log_path, "tool_call")[0]["tool"] == "shell_command"
    shown = json.dumps([r.messages for r in actor.requests])  # everything the model saw
    assert "PATH=" in shown, "env did not run, so this test would prove nothing"
    for secret in ("sk-very-secret", "hunter2"):
        assert secret not in shown, "a secret reached the model through a tool"
        leaked = [f for f in civ.rglob("*") if f.is_file() and secret.encode() in f.read_bytes()]
        assert leaked == [], f"a secret was written to {leaked}"


def test_a_wake_replays_from_its_log(civ: Path, tmp_path: Path) -> None:
    queue().add("Write hello.txt")
    snapshot = tmp_path / "before"
    shutil.copytree(civ, snapshot)
    actor = Actor(call("write_file", path="hello.txt", content="hi"),
                  call("task_complete", summary="wrote it"))
    first = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    recorded = first.log_path.rename(tmp_path / "recorded.jsonl")
    # Back to the state before the wake, then replay the recorded model answers.
    shutil.rmtree(civ)
    shutil.copytree(snapshot, civ)
    replay = ReplayProvider.from_log(recorded)
    second = run_wake("opus", wake_type="TASK", provider=lambda c, s: replay)
    assert (second.status, second.reason) == (first.status, first.reason)
    assert replay.position == len(replay.records) == 6  # the verifier's calls replay too


def test_a_citizen_without_a_home_is_refused(civ_root: Path) -> None:
    with pytest.raises(WakeRefused, match="citizen init"):
        run_wake("opus", provider=never)


def test_reflect_runs_once_per_new_experience(civ: Path) -> None:
    queue().add("x")
    run_wake("opus", wake_type="TASK",
             provider=lambda c, s: Actor(call("task_complete", summary="x done")))
    first = run_wake("opus", wake_type="REFLECT", provider=lambda c, s: Actor(say("I learned.")))
    assert first.status == "ok"
    again = run_wake("opus", wake_type="REFLECT", provider=never)
    assert again.status == "idle"


def test_reflection_and_curation_do_not_feed_each_other(civ: Path) -> None:
    queue().add("x")
    run_wake("opus", wake_type="TASK",
             provider=lambda c, s: Actor(call("task_complete", summary="x done")))
    for kind in ("REFLECT", "LIBRARY"):
        assert run_wake("opus", wake_type=kind,
                        provider=lambda c, s: Actor(say("looked back"))).status == "ok"
    # Nothing new happened in the world: both are idle now, whatever order they come in.
    for kind in ("LIBRARY", "REFLECT", "LIBRARY"):
        assert run_wake("opus", wake_type=kind, provider=never).status == "idle"


def test_a_copied_secret_reaches_neither_model_nor_log(civ: Path) -> None:
    """read_file refuses `.env` by name and a hard link to it by inode, but a copy made
    some other way (a shell before the sandbox, a backup) is just a file: whatever a
    tool reads, known secret values are redacted before the model or any log sees them
    (the last line of defence)."""
    home = paths.home("opus")
    with home.env.open("a") as f:
        f.write("EMAIL_PASS=pw-canary-4e1d\n")
    shutil.copy(home.env, home.dir / "notes.txt")  # the attack's first step
    queue().add("read my notes")
    actor = Actor(call("read_file", path="notes.txt"), call("task_complete", summary="ok"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    shown = json.dumps([r.messages for r in actor.requests])
    assert "[EMAIL_PASS redacted]" in shown, "the file was not read, so this proves nothing"
    assert "pw-canary-4e1d" not in shown
    written = [f for f in civ.rglob("*") if f.is_file() and f.name not in (".env", "notes.txt")
               and b"pw-canary-4e1d" in f.read_bytes()]
    assert written == [], f"the secret was written to {written}"
    assert result.status in ("ok", "task_finished")


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
