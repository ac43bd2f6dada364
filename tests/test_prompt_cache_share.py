"""Mostly cached prompts (issues 33 and 45), the prefix shared across wakes and across
citizens: the tools that open it come in one order whatever order a caller listed them
in; the system block every citizen sends alike comes next, behind a breakpoint of its
own (an hour), so one citizen's write serves the next citizen's first call; the
citizen's own block, identity and stable contexts follow, behind the next."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from citizen import config
from citizen.home.tasks import TaskQueue
from citizen.llm.anthropic_api import AnthropicProvider
from citizen.llm.base import Request, ToolSpec, estimate_tokens
from citizen.llm.scripted import ScriptedProvider
from citizen.tools import core_tools
from citizen.wake.flow import run_wake
from citizen.wake.selection import CATALOGUE, offer
from tests.anthropic_server import API_KEY, Behind, MessagesServer
from tests.prompt_cache import CHANGED, MAX_BREAKPOINTS, PromptCache
from tests.scripts import Actor, call
from tests.test_prompt_cache import IDENTITY, behind, provider

SHARED = "You are a citizen of Experience. " + "Act, then say what you did. " * 500  # past 4096


def _tool(name: str) -> ToolSpec:
    return ToolSpec(name, f"{name}: " + "does one thing well. " * 30, {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})


def _call(tools: tuple[ToolSpec, ...], goals: str, working: str = "## working\nTask 1",
          messages: list[dict[str, Any]] | None = None) -> Request:
    return Request(messages=messages or [{"role": "user", "content": "do the task"}],
                   system=(SHARED, "You are opus.", IDENTITY, goals, working), tools=tools,
                   stable=4, shared=1, cache_ttl="1h", purpose="execute")


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


def test_a_changed_goal_leaves_the_shared_prefix_read(messages_api: MessagesServer) -> None:
    """A goal was added between two wakes: the tools and the shared block are still read
    (their own breakpoint); the citizen's stable blocks are written again."""
    llm = provider(behind(messages_api))
    tools = (_tool("read_file"),)
    llm.complete(_call(tools, "## goals\nship it " * 300))
    second = llm.complete(_call(tools, "## goals\nship it, then test it " * 300))
    system = messages_api.requests[1]["system"]
    assert system[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert system[3]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert second.usage.cache_read_tokens >= estimate_tokens(SHARED)
    assert second.usage.cache_write_tokens >= estimate_tokens("ship it, then test it " * 300)
    missed = behind_of(messages_api).counted[1].missed
    assert ("prefix new or changed", "goals") in missed and CHANGED == "prefix new or changed"
    assert not any(block == "tools" for _, block in missed)


def test_a_loop_call_stays_within_four_breakpoints_and_the_volatile_part_after_them(
        messages_api: MessagesServer) -> None:
    """With the shared block, the citizen's stable blocks, the wake's own context and a
    conversation, the marks are four (the API refuses a fifth), the 1-hour ones first -
    the shared block's the very first - and the work under way comes after every 1-hour
    mark."""
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
    assert body["system"][0].get("cache_control") == {"type": "ephemeral", "ttl": "1h"}
    marks = [m for m in marks if m]
    assert len(marks) == MAX_BREAKPOINTS
    assert [m.get("ttl", "5m") for m in marks] == ["1h", "1h", "5m", "5m"]
    last_long = max(i for i, b in enumerate(body["system"])
                    if b.get("cache_control", {}).get("ttl") == "1h")
    assert all("Task 1" not in b["text"] for b in body["system"][:last_long + 1])


def test_the_shared_block_is_the_same_bytes_for_every_citizen() -> None:
    """Who the citizen is, its focus and its budget are in its own block, after the
    shared one; the shared one names no citizen."""
    tpl = config.templates()
    opus = tpl.system_prompt("opus", "architecture", tpl.citizen("opus").budget)
    mira = tpl.system_prompt("mira", "research", tpl.citizen("mira").budget)
    assert opus[0] == mira[0] and opus[1] != mira[1]
    assert "opus" not in opus[0] and "architecture" not in opus[0]
    assert "opus" in opus[1] and "architecture" in opus[1]


def test_a_tool_pick_never_changes_the_shared_prefix(civ: Path) -> None:
    """With a cache the civilization shares, every loop wake offers the whole catalogue in
    its order whatever the work, and no model is asked to pick (the pick made each task's
    tools a prefix of their own)."""
    llm = ScriptedProvider()
    llm.prompt_cache = True
    tools = core_tools()
    cfg = config.load_citizen("opus")
    from citizen.config import paths
    from citizen.home.wakelog import WakeLog
    from citizen.wake.meter import Meter

    meter = Meter(WakeLog(paths.home("opus"), 1, "TASK"), cfg.budget)
    picks = [offer(llm, meter, config.templates(), tools, work, required=("task_complete",))
             for work in ("Write notes/a.md", "Search the web for lighthouses")]
    assert picks[0] == picks[1] == (list(tools), CATALOGUE)
    assert not llm.requests


def test_another_citizens_first_call_reads_the_prefix_the_first_one_wrote(
        civ: Path, messages_api: MessagesServer) -> None:
    """Two citizens' TASK wakes, one after the other, on the same model through one key
    (the broker's): the second's first call reads the tools and the shared block the
    first one wrote - the byte-identical prefix up to the breakpoint at its end. With the
    citizen's name first and tools picked per task, it read nothing."""
    cache = PromptCache()
    tpl = config.templates()

    def wake(name: str, path: str, task: str) -> Any:
        TaskQueue(config.paths.home(name).tasks).add(task)
        actor = Actor(call("write_file", path=path, content="a"),
                      call("task_complete", summary=f"{path} written"), tier="primary")
        messages_api.responder = Behind(actor, cache)
        before = len(messages_api.requests)
        result = run_wake(name, wake_type="TASK", provider=lambda c, s: AnthropicProvider(
            c, tpl.prices, API_KEY, base_url=messages_api.url, max_retries=0, timeout_s=10))
        assert result.status == "ok", result.reason
        sent = messages_api.requests[before:]
        first = next(i for i, b in enumerate(sent) if b.get("system") and b.get("tools")
                     and not b.get("tool_choice"))
        return sent[first], messages_api.responder.counted[first]

    mira, _ = wake("mira", "notes/a.md", "Write notes/a.md saying a")
    aria, counted = wake("aria", "notes/lighthouses.md",
                         "Search for lighthouses and write notes/lighthouses.md")
    assert mira["model"] == aria["model"]
    shared = [mira["tools"], mira["system"][0]]
    assert json.dumps(shared) == json.dumps([aria["tools"], aria["system"][0]])
    assert aria["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert mira["system"][1]["text"] != aria["system"][1]["text"]  # each its own block
    prefix = sum(estimate_tokens(json.dumps(t, sort_keys=True)) for t in aria["tools"])
    assert counted.read >= prefix + estimate_tokens(aria["system"][0]["text"]) // 2


def behind_of(server: MessagesServer) -> Any:
    return server.responder
