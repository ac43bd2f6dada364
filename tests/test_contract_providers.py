"""The contract every provider keeps, parametrised over all of them: scripted, replay,
local (the embedded model), anthropic (the real SDK against our Messages API server).

A plain request and a structured one each come back as a `Reply` whose text, model,
usage, cost and latency have the right types and signs, and the structured one with
data that matches its schema - whatever the model behind it, so the wake code above
never asks which provider it has.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from citizen import config
from citizen.llm.base import Provider, Reply, Request, Usage
from citizen.llm.replay import ReplayProvider
from citizen.llm.scripted import ScriptedProvider
from tests.anthropic_server import API_KEY, MessagesServer, text, tool_use

PICK = {"type": "object", "additionalProperties": False, "required": ["choice"],
        "properties": {"choice": {"enum": ["yes", "no"]}}}
PLAIN = Request(messages=[{"role": "user", "content": "Say hi."}], system=("You are opus.",),
                max_tokens=8, tier="fast", purpose="contract")
STRUCTURED = Request(messages=[{"role": "user", "content": "Yes or no?"}], output_schema=PICK,
                     max_tokens=32, tier="fast", purpose="contract")
PROVIDERS = ["scripted", "replay", pytest.param("local", marks=pytest.mark.model), "anthropic"]


def _scripted() -> ScriptedProvider:
    return ScriptedProvider([
        Reply(text="hi", model="script", provider="scripted", usage=Usage(3, 1)),
        Reply(text="", model="script", provider="scripted", usage=Usage(4, 2),
              data={"choice": "yes"})])


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Provider]:
    name = request.param
    tpl = config.templates()
    if name == "scripted":
        yield _scripted()
    elif name == "replay":  # a recorded wake: what the scripted provider answered
        recorded = _scripted()
        lines = [{"event": "wake_start", "wake": 1}]
        for req in (PLAIN, STRUCTURED):
            lines.append({"event": "llm_call", "request_digest": req.digest(),
                          "reply": recorded.complete(req).to_dict()})
        log = tmp_path / "wake.jsonl"
        log.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        yield ReplayProvider.from_log(log)
    elif name == "local":
        from citizen.llm.local import LocalProvider

        yield LocalProvider(tpl.citizen("opus"), tpl.local, tpl.prices)
    else:
        from citizen.llm.anthropic_api import AnthropicProvider

        server = MessagesServer().start()
        server.reply(text("hi"))
        server.reply(tool_use("respond", {"choice": "no"}))
        try:
            yield AnthropicProvider(tpl.citizen("opus"), tpl.prices, API_KEY,
                                    base_url=server.url, max_retries=0, timeout_s=10)
        finally:
            server.stop()


def _well_formed(reply: Reply, provider: Provider) -> None:
    assert isinstance(reply.text, str) and isinstance(reply.model, str) and reply.model
    assert isinstance(reply.usage, Usage)
    for n in (reply.usage.input_tokens, reply.usage.output_tokens,
              reply.usage.cache_read_tokens, reply.usage.cache_write_tokens):
        assert isinstance(n, int) and n >= 0
    assert isinstance(reply.cost_usd, float | int) and reply.cost_usd >= 0
    assert reply.latency_s >= 0
    assert provider.describe()


def test_a_plain_and_a_structured_request(provider: Provider) -> None:
    plain = provider.complete(PLAIN)
    _well_formed(plain, provider)
    assert plain.data is None and plain.tool_calls == ()
    structured = provider.complete(STRUCTURED)
    _well_formed(structured, provider)
    jsonschema.validate(structured.data, PICK)
