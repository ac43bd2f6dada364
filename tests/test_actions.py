"""Actions are whole or refused: a tool argument the output grammar cut is never run.

The local provider bounds every string of an action to fit the output budget; a model
that needed more fills the bound exactly and the text stops mid-word or mid-quote. The
old code ran such a command (`unexpected EOF`) or wrote a truncated file. No model is
needed here: the action is the JSON the grammar would produce.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from citizen.llm.base import Reply, ToolCall, Usage
from citizen.llm.local import _as_action, action_schema
from citizen.llm.structured import fit_schema
from citizen.tools import core_tools
from citizen.wake.flow import run_wake
from tests.scripts import Actor, call, events, queue

TOOLS = tuple(t.spec() for n, t in core_tools().items() if n in ("shell_command", "write_file",
                                                                   "append_file"))


def _action(fitted: dict[str, Any], tool: str, **args: str) -> Reply:
    reply = Reply(text="", model="m", provider="local", usage=Usage(1, 1))
    return _as_action(reply, json.dumps({"tool": tool, "args": args}), TOOLS, "id", fitted)


def _bound(fitted: dict[str, Any], tool: str, arg: str) -> int:
    option = next(o for o in fitted["anyOf"] if o["properties"]["tool"].get("const") == tool)
    return int(option["properties"]["args"]["properties"][arg]["maxLength"])


def test_a_command_that_filled_its_bound_is_refused_with_how_to_do_it() -> None:
    fitted = fit_schema(action_schema(TOOLS), 300)
    bound = _bound(fitted, "shell_command", "command")
    cut = _action(fitted, "shell_command", command="echo 'Step 1: " + "x" * bound)
    (refused,) = cut.tool_calls
    assert "cut at" in refused.problem and "append_file" in refused.problem
    whole = _action(fitted, "shell_command", command="echo fine")
    assert whole.tool_calls[0].problem == ""
    content_bound = _bound(fitted, "write_file", "content")
    big = _action(fitted, "write_file", path="a.txt", content="y" * content_bound)
    assert "your content was cut" in big.tool_calls[0].problem


def test_a_refused_action_is_an_observation_and_runs_nothing(civ: Path) -> None:
    queue().add("write a big file")
    cut = Reply(text="", model="scripted", provider="scripted", usage=Usage(1, 1),
                tool_calls=(ToolCall("c-1", "write_file", {"path": "big.txt", "content": "partial"},
                                     problem="your content was cut at 7 characters by the "
                                     "output limit"),))
    actor = Actor(cut, call("write_file", path="big.txt", content="part one, "),
                  call("append_file", path="big.txt", content="part two"),
                  call("task_complete", summary="wrote big.txt in parts"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    first = events(result.log_path, "tool_call")[0]
    assert first["error"] and "cut at 7" in first["result"]
    assert (civ / "opus" / "big.txt").read_text() == "part one, part two"
