"""A tool's policy sits on the tool; its arguments are bound before it runs, so a bug
inside a tool is a failure of the tool, never "bad arguments"."""

from __future__ import annotations

from pathlib import Path

import pytest

from citizen import config
from citizen.config import paths
from citizen.home import wakelog
from citizen.home.tasks import TaskQueue
from citizen.home.wakelog import WakeLog
from citizen.llm.base import ToolCall
from citizen.llm.scripted import ScriptedProvider
from citizen.tools import Tool, ToolFailure, core_tools, tool
from citizen.tools.base import ToolEnv
from citizen.wake import loop, meter
from citizen.wake.flow import run_wake
from tests.scripts import Actor, call, say, tool_env


@tool
def buggy(env: ToolEnv, text: str) -> str:
    """Count words, with a bug.

    :param text: the text
    """
    return len(text.split()) + " words"  # type: ignore[operator, return-value]


def test_a_type_error_inside_a_tool_is_its_failure_not_bad_arguments(civ: Path) -> None:
    env = tool_env("opus")
    env.log = WakeLog(paths.home("opus"), 1, "TASK")
    with pytest.raises(TypeError) as raised:
        loop._dispatch(ToolCall("c1", "buggy", {"text": "a b"}), {"buggy": buggy}, env, {}, "k")
    assert "raised inside the tool buggy" in "".join(raised.value.__notes__)
    (logged,) = [e for e in wakelog.read(env.log.path) if e["event"] == "tool_call"]
    assert logged["tool"] == "buggy" and logged["error"] is True
    assert logged["result"].startswith("failed: TypeError: unsupported operand")
    assert "bad arguments" not in logged["result"]


def test_a_wake_whose_tool_has_a_bug_ends_naming_the_tool(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object, **__: object) -> object:
        raise TypeError("resolve() takes a Path, not that")  # a bug, not the model's fault

    monkeypatch.setattr("citizen.tools.files.resolve", broken)
    TaskQueue(paths.home("opus").tasks).add("read notes.md")
    actor = Actor(call("read_file", path="notes.md"), call("task_complete", summary="read"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "failed"
    assert result.reason.startswith("TypeError: resolve() takes a Path, not that")
    assert "raised inside the tool read_file" in result.reason
    executes = [r for r in actor.requests if r.purpose == "execute"]
    assert len(executes) == 1  # the model was never told its arguments were bad


@pytest.mark.parametrize(("args", "why"), [
    ({"path": "notes.md", "lines": 3}, "got an unexpected keyword argument 'lines'"),
    ({}, "missing a required argument: 'path'"),
    ({"env": "mine", "path": "notes.md"}, "multiple values for argument 'env'"),
])
def test_bad_arguments_are_refused_before_the_call_naming_the_parameters(
        civ: Path, args: dict[str, object], why: str) -> None:
    read = core_tools()["read_file"]
    with pytest.raises(ToolFailure) as refused:
        read.run(tool_env("opus"), args)
    assert str(refused.value) == (f"bad arguments for read_file ({why}); its parameters: "
                                  "path, offset (optional), limit (optional)")
    output, error = loop._dispatch(ToolCall("c1", "read_file", args), {"read_file": read},
                                   tool_env("opus"), {}, "k")
    assert error is True and output == f"error: {refused.value}"


def test_each_built_in_tool_carries_its_policy() -> None:
    tools = core_tools(mail=True, code=True)
    policy = {n: (t.reads, t.cacheable, t.permission) for n, t in tools.items()}
    assert policy["read_file"] == (True, True, None)
    assert policy["memory_search"] == (True, True, None)
    assert policy["code_status"] == (True, True, None)
    assert policy["web_fetch"] == (True, False, None)  # the world changes it: never cached
    assert policy["check_email"] == (True, False, None)
    assert policy["write_file"] == (False, False, None)
    assert policy["shell_command"] == (False, False, None)
    assert policy["send_email"] == (False, False, "can_send_email")
    assert policy["citizen_request"] == (False, False, "can_onboard_citizens")
    assert policy["code_adopt"] == (False, False, "can_modify_shared_code")
    assert policy["tool_propose"] == (False, False, "can_create_tools")
    assert policy["debate_start"] == (False, False, "can_start_debates")
    assert all(t.reads for t in tools.values() if t.cacheable)
    writing = {n: t.writes for n, t in tools.items() if t.writes is not None}
    assert writing == {"write_file": "path", "append_file": "path", "str_replace_file": "path"}


def test_only_a_reading_tool_may_be_cacheable() -> None:
    def peek(env: ToolEnv) -> str:
        """Peek."""
        return ""

    with pytest.raises(ValueError, match="only a reading tool's result may be cached"):
        tool(cacheable=True)(peek)


def test_a_reading_tool_is_cached_within_a_wake_only_when_cacheable(civ: Path) -> None:
    """peek (cacheable) is answered from the cache until poke (a change of state); poll
    (reads, not cacheable) runs every time and empties nothing."""
    ran: list[str] = []

    @tool(reads=True, cacheable=True)
    def peek(env: ToolEnv) -> str:
        """Read our own state."""
        ran.append("peek")
        return "state"

    @tool(reads=True)
    def poll(env: ToolEnv) -> str:
        """Read the world."""
        ran.append("poll")
        return f"world {len(ran)}"

    @tool
    def poke(env: ToolEnv) -> str:
        """Change our state."""
        ran.append("poke")
        return f"poked {len(ran)}"

    tools: dict[str, Tool] = {"peek": peek, "poll": poll, "poke": poke}
    script = [call(n) for n in ("peek", "poll", "peek", "poll", "poke", "peek")]
    llm = ScriptedProvider([*script, say("done")])
    cfg = config.load_citizen("opus")
    env = tool_env("opus")
    env.log = WakeLog(paths.home("opus"), 1, "TASK")
    ending = loop.run(llm, meter.Meter(env.log, cfg.budget), env, tools, system=[],
                      instruction="look around", tier="fast")
    assert ending.status == "end_turn", ending.reason
    assert ran == ["peek", "poll", "poll", "poke", "peek"]
    cached = [(e["tool"], e["cached"]) for e in wakelog.read(env.log.path)
              if e["event"] == "tool_call"]
    assert cached == [("peek", False), ("poll", False), ("peek", True), ("poll", False),
                      ("poke", False), ("peek", False)]
