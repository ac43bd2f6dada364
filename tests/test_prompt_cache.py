"""Mostly cached prompts (issue 33): the stable part of a prompt is one prefix shared by
the calls of a wake and of the next wake, cached as long as the gap between wakes calls
for; the test server caches as the API documents it (tests/prompt_cache.py); a 1-hour
cache write is priced at twice the input price, by the meter and by the broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from citizen import config
from citizen.broker import estimate
from citizen.config import ModelPrice, paths
from citizen.home.contexts import ContextStore
from citizen.llm.anthropic_api import AnthropicProvider
from citizen.llm.base import Reply, Request, ToolSpec, Usage, estimate_tokens
from citizen.llm.scripted import ScriptedProvider
from citizen.wake import prompt
from tests.anthropic_server import API_KEY, Behind, MessagesServer, text
from tests.prompt_cache import CacheRequestError, PromptCache

TOOL = ToolSpec("read_file", "Read a file. " * 40, {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
IDENTITY = "## identity\n" + "I am opus, the architect; I keep things small. " * 800
PRICE = ModelPrice(input=5.0, output=25.0, cache_write=6.25, cache_read=0.5)


def provider(server: MessagesServer) -> AnthropicProvider:
    tpl = config.templates()
    return AnthropicProvider(tpl.citizen("opus"), tpl.prices, API_KEY, base_url=server.url,
                             max_retries=0, timeout_s=10)


def behind(server: MessagesServer) -> MessagesServer:
    server.responder = Behind(ScriptedProvider(default=Reply("ok", "m", "scripted")))
    return server


def execute(working: str, messages: list[dict[str, Any]] | None = None,
            ttl: str = "5m") -> Request:
    """An execute call of a wake: system prompt and identity stable, the work after."""
    return Request(messages=messages or [{"role": "user", "content": "do the task"}],
                   system=("You are opus.", IDENTITY, working), tools=(TOOL,), stable=2,
                   cache_ttl=ttl, purpose="execute")


def test_the_next_wake_reads_the_stable_prefix_though_its_work_changed(
        messages_api: MessagesServer) -> None:
    """The wake's own context (working) changed between two wakes: the system prompt,
    the tools and the identity before it are read from the cache. With one breakpoint at
    the end of the system, any change to the work missed the whole prefix."""
    llm = provider(behind(messages_api))
    first = llm.complete(execute("## working\nTask 1: write notes/a.md"))
    second = llm.complete(execute("## working\nTask 2: write notes/b.md, then test"))
    sent = messages_api.requests
    stable = json.dumps([sent[0]["tools"], sent[0]["system"][:2]])
    assert stable == json.dumps([sent[1]["tools"], sent[1]["system"][:2]])
    assert first.usage.cache_read_tokens == 0 and first.usage.cache_write_tokens > 0
    assert second.usage.cache_read_tokens >= estimate_tokens(IDENTITY)


def test_the_loops_next_call_reads_the_conversation_so_far(
        messages_api: MessagesServer) -> None:
    """The second call of the tool loop reads everything the first sent - system and
    conversation - not only the system: the last block of the conversation is marked."""
    llm = provider(behind(messages_api))
    talk: list[dict[str, Any]] = [{"role": "user", "content": "read notes/a.md " * 600}]
    llm.complete(execute("## working\nTask 1", talk))
    talk += [{"role": "assistant", "content": [{"type": "tool_use", "id": "c1",
                                                 "name": "read_file",
                                                 "input": {"path": "notes/a.md"}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                           "content": "hello " * 800}]}]
    second = llm.complete(execute("## working\nTask 1", talk))
    talk += [{"role": "assistant", "content": "read"},
             {"role": "user", "content": "go on"}]
    third = llm.complete(execute("## working\nTask 1", talk))
    assert second.usage.cache_read_tokens > 0
    # The third reads the second's whole prompt, its tool result included.
    assert third.usage.cache_read_tokens == second.usage.cache_read_tokens \
        + second.usage.cache_write_tokens


def test_a_long_gap_between_wakes_caches_the_stable_prefix_for_an_hour(
        messages_api: MessagesServer) -> None:
    assert prompt.cache_ttl(30) == "1h"  # the next wake comes after 5 minutes, within the hour
    assert prompt.cache_ttl(3) == "5m"  # the 5-minute cache reaches it: the cheaper write
    assert prompt.cache_ttl(120) == "5m"  # past the hour nothing reaches it: write cheaply
    llm = provider(behind(messages_api))
    reply = llm.complete(execute("## working\nTask 1", ttl="1h"))
    system = messages_api.requests[0]["system"]
    assert system[1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert system[2]["cache_control"] == {"type": "ephemeral"}  # after it: 5 minutes
    assert reply.usage.cache_write_1h_tokens >= estimate_tokens(IDENTITY)
    assert reply.usage.cache_write_tokens > reply.usage.cache_write_1h_tokens


def test_a_one_hour_cache_write_costs_twice_the_input_price() -> None:
    """The meter's cost, and the broker's settlement (it parses the usage's split)."""
    assert Usage(cache_write_tokens=1000, cache_write_1h_tokens=1000).cost(PRICE) \
        == pytest.approx(1000 * 2 * PRICE.input / 1e6)
    assert Usage(cache_write_tokens=3000, cache_write_1h_tokens=1000).cost(PRICE) \
        == pytest.approx((2000 * PRICE.cache_write + 1000 * 2 * PRICE.input) / 1e6)
    body = json.dumps({"usage": {"input_tokens": 10, "output_tokens": 1,
                                 "cache_creation_input_tokens": 3000,
                                 "cache_read_input_tokens": 0,
                                 "cache_creation": {"ephemeral_5m_input_tokens": 2000,
                                                    "ephemeral_1h_input_tokens": 1000}}})
    usage = estimate.usage_of(body.encode())
    assert usage is not None and usage.cache_write_1h_tokens == 1000
    assert estimate.cost_usd(usage, PRICE) == pytest.approx(
        (10 * PRICE.input + PRICE.output + 2000 * PRICE.cache_write
         + 1000 * 2 * PRICE.input) / 1e6)


def test_the_broker_forwards_a_one_hour_mark_and_reserves_its_dearer_write() -> None:
    def body(ttl: str) -> bytes:
        mark = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
        return json.dumps({"model": "claude-opus-4-6", "max_tokens": 10, "messages": [
            {"role": "user", "content": "hi"}], "system": [
                {"type": "text", "text": "x" * 100, "cache_control": mark}]}).encode()

    long, short = estimate.parse(body("1h")), estimate.parse(body(""))
    assert long.long_cache and not short.long_cache
    assert estimate.worst_usd(1000, long, PRICE) == pytest.approx(
        (1000 * 2 * PRICE.input + 10 * PRICE.output) / 1e6)
    assert estimate.worst_usd(1000, short, PRICE) == pytest.approx(
        (1000 * PRICE.cache_write + 10 * PRICE.output) / 1e6)
    with pytest.raises(estimate.Unbounded, match="ttl"):
        estimate.parse(body("24h"))


def test_the_stable_contexts_come_before_the_work(civ: Path) -> None:
    """The work under way (working, history) comes after the contexts that change
    rarely, so a change to it leaves the stable blocks byte-identical."""
    cfg = config.load_citizen("opus")
    store = ContextStore(paths.home("opus").contexts, cfg.context_limits, estimate_tokens)
    contexts = store.load_all()
    contexts["goals"].add("ship the library")
    contexts["working"].add("Task 1: write notes/a.md")
    blocks, shown = prompt.system_blocks("You are opus.", contexts, 20000, "execute",
                                         estimate_tokens)
    contexts["working"].add("Task 1: wrote notes/a.md, testing it")
    again, shown_again = prompt.system_blocks("You are opus.", contexts, 20000, "execute",
                                              estimate_tokens)
    stable = prompt.stable_count(shown)
    assert stable == prompt.stable_count(shown_again) and stable < len(blocks)
    assert blocks[:stable] == again[:stable] and blocks[stable:] != again[stable:]
    assert any("ship the library" in b for b in blocks[:stable])
    assert all("Task 1" not in b for b in blocks[:stable])


# ------------------------------------------------------ the test server's cache model

def _body(system: list[dict[str, Any]], model: str = "claude-sonnet-4-5") -> dict[str, Any]:
    return {"model": model, "max_tokens": 10, "system": system,
            "messages": [{"role": "user", "content": "hi"}]}


def _text(text: str, ttl: str | None = None) -> dict[str, Any]:
    mark = None if ttl is None else {"type": "ephemeral", **({"ttl": ttl} if ttl != "5m" else {})}
    return {"type": "text", "text": text, **({"cache_control": mark} if mark else {})}


def test_the_cache_model_hits_only_an_identical_prefix_within_its_lifetime() -> None:
    cache, long = PromptCache(), "stable " * 2000

    def count(system: list[dict[str, Any]], now: float) -> Any:
        body = _body(system)
        return cache.count(body, estimate_tokens(json.dumps(body)), now, estimate_tokens)

    first = count([_text(long), _text("work 1", "5m")], 0.0)
    assert first.read == 0 and first.write_5m > 0
    assert count([_text(long), _text("work 1", "5m")], 200.0).read == first.write_5m
    assert count([_text(long), _text("work 2", "5m")], 300.0).read == 0  # changed before it
    assert count([_text(long), _text("work 1", "5m")], 600.0).read == 0  # 5 min since use
    assert count([_text(long, "1h"), _text("work 3", "5m")], 1000.0).write_1h > 0
    hour = count([_text(long, "1h"), _text("work 4", "5m")], 1000.0 + 3000)
    assert hour.read > 0 and hour.write_5m > 0  # the hour's entry, the new work written
    assert count([_text("short", "5m")], 0.0).write == 0  # under the model's minimum
    with pytest.raises(CacheRequestError):
        count([_text(long, "5m"), _text("work", "1h")], 0.0)  # 1h after 5m: a 400


def test_citizen_spend_reports_each_citizens_cached_share(
        civ: Path, messages_api: MessagesServer) -> None:
    """The broker's ledger keeps each call's cache reads; `citizen spend` shows the share
    of each citizen's prompt tokens read from the cache."""
    from click.testing import CliRunner

    from citizen.cli import cli
    from tests.test_broker import ask, setup_opus

    setup_opus(civ, messages_api.url)
    messages_api.reply(text("one", input_tokens=100, cache_write=900))
    messages_api.reply(text("two", input_tokens=100, cache_read=900))
    ask()
    ask()
    out = CliRunner().invoke(cli, ["spend", "--json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)
    assert (row["citizen"], row["prompt_tokens"], row["cache_read"]) == ("opus", 2000, 900)
    assert row["cached_share"] == pytest.approx(0.45)
