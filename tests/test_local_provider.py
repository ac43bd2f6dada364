"""The local provider with the real embedded model (llama.cpp + Gemma 3 270M).

The model's judgement is close to random, so these tests check mechanics only:
schema-valid output, bounded length, termination - never what it decides.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from citizen import config
from citizen.errors import ProviderError
from citizen.llm.base import Request, ToolSpec
from citizen.llm.local import FINAL, LocalProvider, _to_chat, action_schema
from citizen.llm.model_file import MODEL_FILE, ensure_model, model_path
from citizen.llm.structured import minimum_tokens
from tests.mailserver import free_port

pytestmark = pytest.mark.model

VOTE = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["approve", "approve_with_concerns", "reject"]},
        "rationale": {"type": "string", "maxLength": 120},
        "concerns": {"type": "array", "items": {"type": "string", "maxLength": 60},
                     "maxItems": 3},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["decision", "rationale", "concerns", "confidence"],
    "additionalProperties": False,
}
READ_FILE = ToolSpec("read_file", "Read a file.", {
    "type": "object", "properties": {"path": {"type": "string", "maxLength": 80}},
    "required": ["path"], "additionalProperties": False})
NOTE = ToolSpec("task_progress", "Record progress on the task.", {
    "type": "object", "properties": {"note": {"type": "string", "maxLength": 80}},
    "required": ["note"], "additionalProperties": False})


def make(url: str = "", max_output: int | None = None) -> LocalProvider:
    tpl = config.templates()
    settings = tpl.local if max_output is None else dataclasses.replace(
        tpl.local, max_output_tokens=max_output)
    return LocalProvider(tpl.citizen("opus"), settings, tpl.prices, url=url)


@pytest.fixture(scope="module")
def local() -> LocalProvider:
    return make()


def ask(content: str, **kw: object) -> Request:
    return Request(messages=[{"role": "user", "content": content}], **kw)  # type: ignore[arg-type]


def test_structured_call_is_schema_valid_within_its_cap(local: LocalProvider) -> None:
    reply = local.complete(ask("Should we add a test for the lock? Vote.", output_schema=VOTE,
                               max_tokens=200, system=("You are the verifier.",)))
    jsonschema.validate(reply.data, VOTE)
    assert 0 < reply.usage.output_tokens <= 200
    assert reply.usage.input_tokens > 0
    assert reply.cost_usd == 0.0
    assert reply.model == "gemma-3-270m-q4_k_m"


def test_plain_text_respects_the_provider_cap() -> None:
    reply = make(max_output=12).complete(ask("Tell me a long story.", max_tokens=1000))
    assert reply.usage.output_tokens <= 12
    assert reply.stop_reason in {"length", "stop"}


def test_tool_choice_is_a_tool_call_or_an_answer(local: LocalProvider) -> None:
    reply = local.complete(ask("Read the file README.md", tools=(READ_FILE, NOTE),
                               max_tokens=60))
    if reply.tool_calls:
        (call,) = reply.tool_calls
        assert call.name in {"read_file", "task_progress"} and reply.stop_reason == "tool_use"
        # The grammar only allows valid arguments; one that filled its bound (60 tokens
        # leave a path of a character or two) is marked cut, never run as if whole.
        assert call.problem == "" or "was cut at" in call.problem
        schema = READ_FILE.input_schema if call.name == "read_file" else NOTE.input_schema
        jsonschema.validate(dict(call.input), schema)
    else:
        assert reply.stop_reason == "end_turn"


def test_tokens_are_counted_by_the_real_tokenizer(local: LocalProvider) -> None:
    count = local.count_tokens("The quick brown fox jumps over the lazy dog.")
    assert 5 <= count <= 15


def test_system_blocks_and_tools_go_into_the_first_user_turn() -> None:
    turns = _to_chat(Request(
        system=("You are opus.",), tools=(READ_FILE,),
        messages=[{"role": "user", "content": "go"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "1",
                                                     "name": "read_file",
                                                     "input": {"path": "a"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "1",
                                                "content": "file text"}]}]), [READ_FILE])
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[0]["content"].startswith("You are opus.")
    assert "read_file: Read a file." in turns[0]["content"] and FINAL in turns[0]["content"]
    assert "file text" in turns[2]["content"]
    assert turns[2]["content"].endswith("Answer with JSON only.")


def test_model_file_is_one_shared_copy() -> None:
    path = ensure_model()
    assert path == model_path() and path.name == MODEL_FILE
    assert path.stat().st_size > 200_000_000
    assert ensure_model() == path  # the second call reuses it


def test_concurrent_first_assembly_yields_one_complete_file(tmp_path: Path) -> None:
    cache = tmp_path / "models"
    code = "from citizen.llm.model_file import ensure_model; print(ensure_model())"
    env = {**os.environ, "EXPERIENCE_MODEL_DIR": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert set(outs) == {str(cache / MODEL_FILE)}
    assert (cache / MODEL_FILE).stat().st_size == model_path().stat().st_size
    assert not list(cache.glob("*.partial-*"))  # no half-written file left behind


@pytest.fixture(scope="module")
def model_server() -> Iterator[str]:
    """llama-cpp-python's own OpenAI-compatible server, as a real subprocess."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(ensure_model()),
         "--chat_format", "gemma", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/v1/models", timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the llama.cpp server did not start")
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_openai_compatible_server_by_url(model_server: str) -> None:
    llm = make(url=model_server)
    assert model_server in llm.describe()
    reply = llm.complete(ask("Vote on adding tests.", output_schema=VOTE, max_tokens=200))
    jsonschema.validate(reply.data, VOTE)
    assert reply.usage.output_tokens > 0
    plain = llm.complete(ask("Say hi.", max_tokens=8))
    assert plain.usage.output_tokens <= 8 and plain.usage.input_tokens > 0
    assert plain.stop_reason in {"length", "stop"}  # the server's own finish reason


def test_unreachable_server_names_the_fix() -> None:
    llm = make(url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ProviderError, match="cannot reach the model server"):
        llm.complete(ask("hi", max_tokens=4))


def test_a_cap_too_small_for_the_tool_schema_is_raised_not_a_crash() -> None:
    from citizen.tools import core_tools

    tools = tuple(t.spec() for t in core_tools().values())
    llm = make()
    sent: list[dict[str, Any]] = []
    chat = llm.backend.chat
    def spy(body: dict[str, Any]) -> dict[str, Any]:
        sent.append(body)
        return chat(body)
    llm.backend.chat = spy  # type: ignore[method-assign]
    reply = llm.complete(ask("Read README.md", tools=tools, max_tokens=16))
    raised = minimum_tokens(action_schema(tools))
    assert raised > 16 and [b["max_tokens"] for b in sent] == [raised]
    assert 0 < reply.usage.output_tokens <= raised
    if reply.tool_calls:  # the action decoded whole: one call, or the final answer
        (call,) = reply.tool_calls
        assert call.name in {t.name for t in tools} and reply.stop_reason == "tool_use"
    else:
        assert reply.stop_reason == "end_turn"
