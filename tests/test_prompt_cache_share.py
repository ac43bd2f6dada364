"""Mostly cached prompts (issue 33), the prefix shared across wakes: the tools that open
it come in one order whatever order a selection listed them in, and the system prompt
and identity keep a cache entry of their own, so a change in a later stable context
(a goal added between two wakes) leaves them read."""

from __future__ import annotations

import json
from typing import Any

from citizen.llm.base import Request, ToolSpec, estimate_tokens
from tests.anthropic_server import MessagesServer
from tests.prompt_cache import CHANGED, MAX_BREAKPOINTS
from tests.test_prompt_cache import IDENTITY, behind, provider


def _tool(name: str) -> ToolSpec:
    return ToolSpec(name, f"{name}: " + "does one thing well. " * 30, {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})


def _call(tools: tuple[ToolSpec, ...], goals: str, working: str = "## working\nTask 1",
          messages: list[dict[str, Any]] | None = None) -> Request:
    return Request(messages=messages or [{"role": "user", "content": "do the task"}],
                   system=("You are opus.", IDENTITY, goals, working), tools=tools, stable=3,
                   cache_ttl="1h", purpose="execute")


def test_the_same_tools_in_another_order_open_the_same_prefix(
        messages_api: MessagesServer) -> None:
    """Two wakes whose selection named the same tools in a different order send the
    same tools array, so the second reads the first's whole stable prefix."""
    llm = provider(behind(messages_api))
    read, write = _tool("read_file"), _tool("write_file")
    llm.complete(_call((write, read), "## goals\nship it"))
    second = llm.complete(_call((read, write), "## goals\nship it", "## working\nTask 2"))
    sent = messages_api.requests
    assert json.dumps(sent[0]["tools"]) == json.dumps(sent[1]["tools"])
    assert [t["name"] for t in sent[0]["tools"]] == ["read_file", "write_file"]
    assert second.usage.cache_read_tokens >= estimate_tokens(IDENTITY)


def test_a_changed_goal_leaves_the_system_prompt_and_identity_read(
        messages_api: MessagesServer) -> None:
    """A goal was added between two wakes: the prefix up to identity is still read (it
    has its own breakpoint); only the goals and what follows are written again."""
    llm = provider(behind(messages_api))
    tools = (_tool("read_file"),)
    llm.complete(_call(tools, "## goals\nship it " * 300))
    second = llm.complete(_call(tools, "## goals\nship it, then test it " * 300))
    system = messages_api.requests[1]["system"]
    assert system[1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert system[2]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert second.usage.cache_read_tokens >= estimate_tokens(IDENTITY)
    assert second.usage.cache_write_tokens >= estimate_tokens("ship it, then test it " * 300)
    missed = behind_of(messages_api).counted[1].missed
    assert ("prefix new or changed", "goals") in missed and CHANGED == "prefix new or changed"
    assert not any(block == "identity" for _, block in missed)


def test_a_loop_call_stays_within_four_breakpoints_and_the_volatile_part_after_them(
        messages_api: MessagesServer) -> None:
    """With identity, stable contexts, the wake's own context and a conversation, the
    marks are four (the API refuses a fifth), the 1-hour ones first, and the work under
    way comes after every 1-hour mark."""
    llm = provider(behind(messages_api))
    talk: list[dict[str, Any]] = [
        {"role": "user", "content": "do the task"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1",
                                           "name": "read_file", "input": {"path": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                      "content": "hello"}]}]
    llm.complete(_call((_tool("read_file"),), "## goals\nship it", messages=talk))
    body = messages_api.requests[0]
    marks = [b.get("cache_control") for b in [*body["tools"], *body["system"],
                                              *body["messages"][-1]["content"]]]
    marks = [m for m in marks if m]
    assert len(marks) == MAX_BREAKPOINTS
    assert [m.get("ttl", "5m") for m in marks] == ["1h", "1h", "5m", "5m"]
    last_long = max(i for i, b in enumerate(body["system"])
                    if b.get("cache_control", {}).get("ttl") == "1h")
    assert all("Task 1" not in b["text"] for b in body["system"][:last_long + 1])


def behind_of(server: MessagesServer) -> Any:
    return server.responder
