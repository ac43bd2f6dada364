"""Structured output handling, and the replay and scripted providers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from citizen.errors import ConfigError, ReplayMismatch, StructuredOutputError
from citizen.llm.base import Reply, Request, Usage
from citizen.llm.replay import ReplayProvider
from citizen.llm.scripted import ScriptedProvider
from citizen.llm.structured import (
    GRAMMAR_MAX_STRING,
    bound_schema,
    complete_structured,
    parse_json,
)

PICK: dict[str, Any] = {
    "type": "object", "properties": {"tools": {"type": "array", "items": {"type": "string"}},
                                     "why": {"type": "string", "maxLength": 5000}},
    "required": ["tools"]}


def reply(text: str) -> Reply:
    return Reply(text=text, model="m", provider="scripted", usage=Usage(10, 5))


def test_bound_schema_bounds_every_string_and_list() -> None:
    bounded = bound_schema(PICK, max_string=50, max_items=7)
    assert bounded["properties"]["tools"]["maxItems"] == 7
    assert bounded["properties"]["tools"]["items"]["maxLength"] == 50
    # An explicit bound is kept, but clamped to what llama.cpp's grammar survives.
    assert bounded["properties"]["why"]["maxLength"] == GRAMMAR_MAX_STRING
    assert "maxItems" not in PICK["properties"]["tools"]  # the input is not modified


def test_bound_schema_leaves_enums_alone() -> None:
    schema = {"type": "string", "enum": ["a", "b"]}
    assert bound_schema(schema) == schema


def test_parse_json_accepts_raw_newlines_in_strings() -> None:
    assert parse_json('{"tools": ["a"], "why": "line1\nline2"}', PICK)["why"] == "line1\nline2"


@pytest.mark.parametrize(("text", "fragment"), [
    ("not json", "not valid JSON"),
    ('{"why": "no tools"}', "'tools' is a required property"),
    ('{"tools": [1]}', "at tools/0: 1 is not of type 'string'"),
])
def test_parse_json_explains_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(StructuredOutputError) as info:
        parse_json(text, PICK)
    assert fragment in str(info.value)
    assert info.value.raw == text


def test_complete_structured_shows_the_model_its_error_and_retries() -> None:
    llm = ScriptedProvider([reply("{oops"), reply('{"tools": ["read_file"]}')])
    out = complete_structured(llm, Request(messages=[{"role": "user", "content": "pick"}],
                                           output_schema=PICK), attempts=2)
    assert out.data == {"tools": ["read_file"]}
    retry = llm.requests[1].messages
    assert retry[-2] == {"role": "assistant", "content": "{oops"}
    assert "not valid JSON" in retry[-1]["content"]


def test_complete_structured_gives_up_after_its_attempts() -> None:
    llm = ScriptedProvider(default=reply("[]"))
    with pytest.raises(StructuredOutputError):
        complete_structured(llm, Request(messages=[{"role": "user", "content": "pick"}],
                                         output_schema=PICK), attempts=3)
    assert len(llm.requests) == 3


def test_scripted_provider_runs_out_loudly() -> None:
    from citizen.errors import ProviderError

    llm = ScriptedProvider([reply("one")])
    llm.complete(Request(messages=[]))
    with pytest.raises(ProviderError, match="ran out"):
        llm.complete(Request(messages=[]))


def _record(path: Path, requests: list[Request], replies: list[Reply]) -> None:
    lines = [{"event": "wake_start", "wake": 1}]
    for req, rep in zip(requests, replies, strict=True):
        lines.append({"event": "llm_call", "request_digest": req.digest(),
                      "reply": rep.to_dict()})
    lines.append({"event": "wake_end", "status": "ok"})
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_replay_answers_request_by_request(tmp_path: Path) -> None:
    first = Request(messages=[{"role": "user", "content": "one"}], system=("s",))
    second = Request(messages=[{"role": "user", "content": "two"}], output_schema=PICK)
    recorded = [reply("first answer"),
                Reply(text="", model="m", provider="anthropic", data={"tools": ["x"]},
                      usage=Usage(1, 2, 3, 4), cost_usd=0.5)]
    log = tmp_path / "wake.jsonl"
    _record(log, [first, second], recorded)
    replay = ReplayProvider.from_log(log)
    assert replay.complete(first) == recorded[0]
    assert replay.complete(second) == recorded[1]
    with pytest.raises(ReplayMismatch, match="only 2 model calls"):
        replay.complete(first)


def test_replay_detects_a_diverging_request(tmp_path: Path) -> None:
    log = tmp_path / "wake.jsonl"
    asked = Request(messages=[{"role": "user", "content": "one"}])
    _record(log, [asked], [reply("x")])
    other = Request(messages=[{"role": "user", "content": "changed prompt"}])
    with pytest.raises(ReplayMismatch, match="diverged"):
        ReplayProvider.from_log(log).complete(other)
    assert ReplayProvider.from_log(log, strict=False).complete(other).text == "x"


def test_replay_refuses_a_corrupt_log(tmp_path: Path) -> None:
    log = tmp_path / "wake.jsonl"
    log.write_text('{"event": "llm_call"}\n{truncated\n')
    with pytest.raises(ConfigError, match="line 2"):
        ReplayProvider.from_log(log)


def test_request_digest_is_stable_and_sensitive() -> None:
    a = Request(messages=[{"role": "user", "content": "x"}], max_tokens=10)
    assert a.digest() == Request(messages=[{"role": "user", "content": "x"}],
                                 max_tokens=10).digest()
    assert a.digest() != Request(messages=[{"role": "user", "content": "x"}],
                                 max_tokens=11).digest()


BIG: dict[str, Any] = {"type": "object", "properties": {
    "decision": {"enum": ["approve", "reject"]},
    "rationale": {"type": "string", "maxLength": 900},
    "concerns": {"type": "array", "items": {"type": "string", "maxLength": 300}, "maxItems": 10},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1}}}


@pytest.mark.parametrize("budget", [128, 200, 512, 4000])
def test_fit_schema_makes_the_worst_case_fit_the_token_cap(budget: int) -> None:
    from citizen.llm.structured import fit_schema, worst_case_chars

    assert worst_case_chars(bound_schema(BIG)) > 4000  # the unfitted schema would not fit
    fitted = fit_schema(BIG, budget)
    assert worst_case_chars(fitted) <= budget
    assert fitted["properties"]["rationale"]["maxLength"] >= 1
    assert fitted["properties"]["decision"] == BIG["properties"]["decision"]


def test_fit_schema_refuses_an_impossible_budget() -> None:
    from citizen.llm.structured import fit_schema

    with pytest.raises(ValueError, match="raise max_tokens"):
        fit_schema(BIG, 64)


def test_worst_case_counts_the_longest_json_text() -> None:
    from citizen.llm.structured import worst_case_chars

    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}}
    longest = json.dumps({"a": '"""'})  # escapes double each character
    assert worst_case_chars(schema) >= len(longest)


def test_clamp_numbers_applies_bounds_and_nothing_else() -> None:
    from citizen.llm.structured import clamp_numbers

    data = {"confidence": 1155079951, "decision": "approve", "extra": 5,
            "concerns": ["a"], "flag": True}
    out = clamp_numbers(BIG, data)
    assert out["confidence"] == 1
    assert clamp_numbers(BIG, {"confidence": -3})["confidence"] == 0
    assert {k: v for k, v in out.items() if k != "confidence"} == {
        k: v for k, v in data.items() if k != "confidence"}


def test_minimum_tokens_is_the_least_cap_that_fits() -> None:
    from citizen.llm.structured import fit_schema, minimum_tokens

    need = minimum_tokens(BIG)
    fit_schema(BIG, need)  # fits exactly at the minimum
    with pytest.raises(ValueError):
        fit_schema(BIG, need - 1)
