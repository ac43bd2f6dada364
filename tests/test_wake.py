"""The wake flow with a scripted model: gate, limits, loops, logs, crash safety, secrets,
replay. (What makes a task done, and a task carried across wakes: test_wake_tasks.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from citizen import config
from citizen.config import paths
from citizen.home import wakelog
from citizen.llm.base import Reply, Request
from citizen.llm.replay import ReplayProvider
from citizen.wake.flow import WakeRefused, run_wake
from tests.scripts import Actor, call, events, queue, say


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
