"""The Anthropic provider, through the real SDK, against a local Messages API server."""

from __future__ import annotations

import pytest

from citizen import config
from citizen.errors import ProviderError, StructuredOutputError
from citizen.llm.anthropic_api import RESPOND_TOOL, AnthropicProvider
from citizen.llm.base import Request, ToolSpec
from tests.anthropic_server import API_KEY, MessagesServer, text, tool_use

VOTE = {
    "type": "object",
    "properties": {"decision": {"enum": ["approve", "reject"]},
                   "rationale": {"type": "string", "maxLength": 200}},
    "required": ["decision", "rationale"],
    "additionalProperties": False,
}
READ_FILE = ToolSpec("read_file", "Read a file from the citizen's home.", {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
})


def provider(server: MessagesServer, name: str = "opus", retries: int = 2,
             key: str = API_KEY) -> AnthropicProvider:
    tpl = config.templates()
    return AnthropicProvider(tpl.citizen(name), tpl.prices, key, base_url=server.url,
                             max_retries=retries, timeout_s=10)


def ask(system: tuple[str, ...] = ("You are opus.", "Your identity: architect."),
        **kw: object) -> Request:
    return Request(messages=[{"role": "user", "content": "hello"}], system=system, **kw)  # type: ignore[arg-type]


def test_text_reply_with_usage_and_cost(messages_api: MessagesServer) -> None:
    messages_api.reply(text("hi there", model="claude-opus-4-6", input_tokens=1000,
                            output_tokens=200, cache_write=3000, cache_read=5000))
    reply = provider(messages_api).complete(ask())
    assert reply.text == "hi there"
    assert reply.provider == "anthropic"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (1000, 200)
    assert (reply.usage.cache_write_tokens, reply.usage.cache_read_tokens) == (3000, 5000)
    price = config.templates().prices["claude-opus-4-6"]
    expected = (1000 * price.input + 200 * price.output + 3000 * price.cache_write
                + 5000 * price.cache_read) / 1e6
    assert reply.cost_usd == pytest.approx(expected)
    assert reply.cost_usd > 0


def test_request_marks_stable_system_prefix_for_caching(messages_api: MessagesServer) -> None:
    messages_api.reply(text("ok"))
    provider(messages_api).complete(ask(tools=(READ_FILE,)))
    sent = messages_api.requests[0]
    assert [b["text"] for b in sent["system"]] == ["You are opus.", "Your identity: architect."]
    # One breakpoint, on the last stable block: it caches the tools and the whole system.
    assert "cache_control" not in sent["system"][0]
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sent["tools"][0]["name"] == "read_file"
    assert sent["tools"][0]["input_schema"]["required"] == ["path"]
    assert sent["model"] == "claude-opus-4-6"  # the primary seat of opus
    assert MessagesServer.key_of(messages_api.headers[0]) == API_KEY


def test_a_structured_step_writes_no_cache_it_would_never_read(
        messages_api: MessagesServer) -> None:
    """A vote, a move, a bid: its prefix ends in its own schema and is asked once, so a
    cache write would cost 25 % more and never be read (bench/month.py measured it)."""
    messages_api.reply(tool_use("respond", {"vote": "yes"}))
    schema = {"type": "object", "properties": {"vote": {"type": "string"}}}
    provider(messages_api).complete(ask(output_schema=schema))
    sent = messages_api.requests[0]
    assert not any("cache_control" in b for b in sent["system"] + sent["tools"])


def test_tier_selects_the_council_seat(messages_api: MessagesServer) -> None:
    messages_api.reply(text("ok"))
    provider(messages_api).complete(ask(tier="fast"))
    assert messages_api.requests[0]["model"] == "claude-haiku-4-5"


def test_tool_use_round_trip(messages_api: MessagesServer) -> None:
    messages_api.reply(tool_use("read_file", {"path": "notes.md"}))
    messages_api.reply(text("The notes say hello."))
    llm = provider(messages_api)
    first = llm.complete(ask(tools=(READ_FILE,)))
    assert first.stop_reason == "tool_use"
    (call,) = first.tool_calls
    assert (call.name, dict(call.input), call.problem) == ("read_file", {"path": "notes.md"}, "")
    follow_up = Request(
        system=("You are opus.",), tools=(READ_FILE,),
        messages=[
            {"role": "user", "content": "read my notes"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": call.id,
                                               "name": call.name, "input": dict(call.input)}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                          "content": "hello"}]},
        ])
    second = llm.complete(follow_up)
    assert second.text == "The notes say hello."
    sent = messages_api.requests[1]["messages"]
    assert sent[2]["content"][0] == {"type": "tool_result", "tool_use_id": "toolu_1",
                                     "content": "hello",  # the next call reads up to here
                                     "cache_control": {"type": "ephemeral"}}


def test_tool_input_breaking_its_schema_is_flagged_not_raised(
        messages_api: MessagesServer) -> None:
    messages_api.reply(tool_use("read_file", {"path": 42}))
    (call,) = provider(messages_api).complete(ask(tools=(READ_FILE,))).tool_calls
    assert "path" in call.problem and "not of type 'string'" in call.problem


def test_unknown_tool_is_flagged(messages_api: MessagesServer) -> None:
    messages_api.reply(tool_use("rm_rf", {}))
    (call,) = provider(messages_api).complete(ask(tools=(READ_FILE,))).tool_calls
    assert call.problem == "unknown tool 'rm_rf'"


def test_structured_output_through_a_forced_tool(messages_api: MessagesServer) -> None:
    messages_api.reply(tool_use(RESPOND_TOOL, {"decision": "approve", "rationale": "safe"}))
    reply = provider(messages_api).complete(ask(output_schema=VOTE))
    assert reply.data == {"decision": "approve", "rationale": "safe"}
    sent = messages_api.requests[0]
    assert sent["tool_choice"] == {"type": "tool", "name": RESPOND_TOOL}
    assert sent["tools"][-1]["input_schema"] == VOTE


def test_structured_output_breaking_its_schema_is_a_clear_error(
        messages_api: MessagesServer) -> None:
    messages_api.reply(tool_use(RESPOND_TOOL, {"decision": "maybe", "rationale": "hmm"}))
    with pytest.raises(StructuredOutputError) as info:
        provider(messages_api).complete(ask(output_schema=VOTE))
    assert "decision" in info.value.problem and "maybe" in info.value.problem
    assert "maybe" in info.value.raw  # kept, so it can go back to the model


def test_structured_output_without_the_tool_is_a_clear_error(
        messages_api: MessagesServer) -> None:
    messages_api.reply(text("I approve."))
    with pytest.raises(StructuredOutputError, match="did not use the respond tool"):
        provider(messages_api).complete(ask(output_schema=VOTE))


def test_rate_limit_is_retried_then_succeeds(messages_api: MessagesServer) -> None:
    messages_api.error(429, times=2)
    messages_api.reply(text("after the wait"))
    reply = provider(messages_api, retries=2).complete(ask())
    assert reply.text == "after the wait"
    assert len(messages_api.requests) == 3


@pytest.mark.parametrize("status", [529, 500])
def test_overload_exhausting_retries_is_a_clear_error(
        messages_api: MessagesServer, status: int) -> None:
    messages_api.error(status, times=3, message="Overloaded")
    with pytest.raises(ProviderError) as info:
        provider(messages_api, retries=2).complete(ask())
    assert len(messages_api.requests) == 3  # first try + 2 retries
    message = str(info.value)
    assert f"HTTP {status}" in message and "after up to 2 retries" in message
    assert "next wake will try again" in message


def test_bad_key_names_the_fix(messages_api: MessagesServer) -> None:
    # dev mode: the home's .env (a server names root's /etc/experience/<name>.env instead)
    with pytest.raises(ProviderError, match=r"HTTP 401.*check ANTHROPIC_API_KEY in /\S+/\.env"):
        provider(messages_api, key="sk-wrong").complete(ask())
    assert len(messages_api.requests) == 1  # 401 is not retried


def test_no_sampling_parameter_goes_to_the_api(messages_api: MessagesServer) -> None:
    """API version 2026-10-21 (what SDK 2.x sends) answers 400 to temperature, top_p or
    top_k, even at their defaults: the council's temperatures must not be sent there."""
    messages_api.reply(text("a"))
    provider(messages_api).complete(Request(messages=[{"role": "user", "content": "hi"}],
                                            tier="fast"))
    sent = messages_api.requests[0]
    assert not {"temperature", "top_p", "top_k"} & set(sent)


def test_a_prompt_too_long_is_not_called_a_bug(messages_api: MessagesServer) -> None:
    """The API's own words for a prompt past the window: the fix is the context caps."""
    messages_api.error(400, message="prompt is too long: 214012 tokens > 200000 maximum")
    with pytest.raises(ProviderError, match=r"HTTP 400.*lower the context caps") as info:
        provider(messages_api).complete(ask())
    assert "bug in Experience" not in str(info.value)


def test_unreachable_api_names_the_fix() -> None:
    tpl = config.templates()
    llm = AnthropicProvider(tpl.citizen("opus"), tpl.prices, API_KEY,
                            base_url="http://127.0.0.1:9", max_retries=0, timeout_s=2)
    with pytest.raises(ProviderError, match="cannot reach the Anthropic API"):
        llm.complete(ask())
