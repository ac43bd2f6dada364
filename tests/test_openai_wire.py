"""Native tool calling's wire format: our Anthropic-shaped conversation goes out as
OpenAI chat messages, and a call cut by the output limit comes back refused."""

from __future__ import annotations

import json

from citizen.llm import openai_wire
from citizen.llm.base import Request, ToolSpec

SHELL = ToolSpec("shell_command", "Run a command.",
                 {"type": "object", "required": ["command"], "additionalProperties": False,
                  "properties": {"command": {"type": "string"}}})


def test_a_tool_loop_conversation_becomes_openai_messages() -> None:
    request = Request(system=("You are opus.", "## working\n- task"), messages=[
        {"role": "user", "content": "List your home."},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "c1", "name": "shell_command", "input": {"command": "ls"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "exit code 0\nnotes"}]},
    ], tools=(SHELL,))
    out = openai_wire.messages(request)
    assert out[0] == {"role": "system", "content": "You are opus.\n\n## working\n- task"}
    assert out[1] == {"role": "user", "content": "List your home."}
    assert out[2]["tool_calls"][0]["function"] == {"name": "shell_command",
                                                   "arguments": json.dumps({"command": "ls"})}
    assert out[2]["content"] == "Looking."
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": "exit code 0\nnotes"}
    assert openai_wire.tools_param([SHELL])[0]["function"]["parameters"] == SHELL.input_schema


def test_a_long_command_arrives_whole() -> None:
    """No grammar bound: a 5000-character command is a call like any other."""
    long = "printf '%s' " + "x" * 5000
    message = {"tool_calls": [{"id": "a", "type": "function", "function": {
        "name": "shell_command", "arguments": json.dumps({"command": long})}}]}
    (call,) = openai_wire.calls(message, [SHELL], "tool_calls", 4096)
    assert call.input["command"] == long and call.problem == ""


def test_a_call_cut_by_the_output_limit_is_refused_not_run() -> None:
    message = {"tool_calls": [{"id": "a", "type": "function", "function": {
        "name": "shell_command", "arguments": '{"command": "echo \\"Step 1: in your'}}]}
    (call,) = openai_wire.calls(message, [SHELL], "length", 256)
    assert "cut at the output limit (256 tokens)" in call.problem
    assert "append_file" in call.problem


def test_unknown_tools_and_bad_arguments_are_problems() -> None:
    message = {"tool_calls": [
        {"id": "a", "function": {"name": "rm_rf", "arguments": "{}"}},
        {"id": "b", "function": {"name": "shell_command", "arguments": '{"cmd": 1}'}}]}
    unknown, bad = openai_wire.calls(message, [SHELL], "tool_calls", 256)
    assert unknown.problem == "unknown tool 'rm_rf'"
    assert "command" in bad.problem
