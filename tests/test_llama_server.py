"""Both providers against a real server nobody here wrote: llama.cpp's `llama-server`
with the packaged model. The anthropic provider is the real SDK, unpatched, talking to
the server's Messages API (/v1/messages); the local provider's server mode talks to its
OpenAI API (/v1/chat/completions), with native tool calling.

The model is a 270M base model: nothing here asserts what it decides - only that the
calls go through, come back in shape (a structured reply matches its schema: the server
forces the tool call with a grammar), are metered from the server's own usage figures,
and that the server's errors turn into messages that name the fix.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from citizen import config
from citizen.cli import cli
from citizen.config import paths
from citizen.errors import ProviderError
from citizen.home import wakelog
from citizen.home.tasks import STATES, TaskQueue
from citizen.llm.base import Request
from citizen.tools import core_tools
from citizen.wake.flow import run_wake
from tests.llama_server import running
from tests.mailserver import free_port

pytestmark = pytest.mark.model
TEMPLATE = paths.project_dir() / "templates" / "llama-server" / "gemma.jinja"
PICK = {"type": "object", "additionalProperties": False, "required": ["choice"],
        "properties": {"choice": {"enum": ["yes", "no"]}}}
KEY = "sk-not-checked-by-llama-server"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """llama-server with tool calling (--jinja, our Gemma template), greedy sampling so a
    run is repeatable."""
    with running("--jinja", "--chat-template-file", str(TEMPLATE), "--temp", "0",
                 "--seed", "1") as url:
        yield url


@pytest.fixture
def sdk_env(civ: Path, server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server)
    return server


def anthropic(url: str):  # type: ignore[no-untyped-def]
    from citizen.llm.anthropic_api import AnthropicProvider

    tpl = config.templates()
    return AnthropicProvider(config.load_citizen("opus"), tpl.prices, KEY, base_url=url,
                             max_retries=0, timeout_s=120)


def test_citizen_ask_through_the_sdk(sdk_env: str) -> None:
    result = CliRunner().invoke(cli, ["ask", "--json", "--provider", "anthropic",
                                      "--max-tokens", "16", "Say hi"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["provider"] == "anthropic"
    usage = out["usage"]
    assert usage["input_tokens"] > 10 and 0 < usage["output_tokens"] <= 16
    price = config.templates().prices[config.load_citizen("opus").seat("primary").model]
    expected = (usage["input_tokens"] * price.input + usage["output_tokens"] * price.output
                + usage["cache_read_tokens"] * price.cache_read) / 1e6
    assert out["cost_usd"] == pytest.approx(expected)


def test_a_structured_call_through_the_sdk(server: str, civ: Path) -> None:
    """The forced `respond` tool: the server constrains the call to the schema."""
    reply = anthropic(server).complete(Request(
        messages=[{"role": "user", "content": "Should we add tests? Answer yes or no."}],
        output_schema=PICK, max_tokens=300, tier="fast", purpose="contract"))
    jsonschema.validate(reply.data, PICK)
    assert reply.usage.output_tokens > 0 and reply.cost_usd > 0


def test_a_task_wake_through_the_sdk(sdk_env: str, civ: Path) -> None:
    """A whole TASK wake: deliverables, selection, routing, the tool loop - every call
    over the SDK to llama-server, metered from its usage; whatever the model does, the
    task is never filed done without its file."""
    cfg = paths.home("opus").config
    data = json.loads(cfg.read_text())
    data["llm"] = {**data.get("llm", {}), "provider": "anthropic"}
    data["budget"] = {**data.get("budget", {}), "max_iterations": 3}
    cfg.write_text(json.dumps(data))
    tasks = TaskQueue(paths.home("opus").tasks)
    task = tasks.add("Write notes/hi.md saying hi.")
    result = run_wake("opus", wake_type="TASK")
    log = wakelog.read(result.log_path)
    assert next(e for e in log if e["event"] == "provider")["provider"].startswith(
        "anthropic (claude-opus-4-6 via the broker")  # which forwards to llama-server
    calls = [e for e in log if e["event"] == "llm_call"]
    answered = [c for c in calls if "reply" in c]
    # A reply that broke its schema is logged with the problem (and the raw text) and
    # billed from the server's usage like any other; the step falls back to its rule.
    assert all("error" in c and "raw" in c for c in calls if "reply" not in c)
    assert answered and {c["reply"]["provider"] for c in answered} == {"anthropic"}
    assert all(c["tokens_in"] > 0 and c["cost_usd"] > 0 for c in calls)
    assert result.cost_usd == pytest.approx(sum(c["cost_usd"] for c in calls), abs=1e-5)
    # Every call went through the broker, which settled it from llama-server's usage.
    from citizen.broker import service

    ledger = sqlite3.connect(service.ledger_path())
    # What the broker billed is what the wake logged (an answer it released - an error the
    # provider retried - costs nothing and is no llm_call).
    states = [r[0] for r in ledger.execute("SELECT state FROM calls WHERE state != 'released'")]
    ledger.close()
    assert states == ["settled"] * len(calls)
    made = (civ / "opus" / "notes" / "hi.md").is_file()
    state = tasks.where(task.id)
    assert state in STATES and (state != "done" or made)  # kept whole, never done unmade


def test_the_servers_errors_name_the_fix(server: str, civ: Path) -> None:
    llm = anthropic(server)
    huge = "word " * 20000  # far past the server's 8192-token context
    too_long = r"HTTP 400.*exceeds the available context.*lower the context caps"
    with pytest.raises(ProviderError, match=too_long):
        llm.complete(Request(messages=[{"role": "user", "content": huge}], max_tokens=8))
    gone = anthropic(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ProviderError, match="cannot reach the Anthropic API"):
        gone.complete(Request(messages=[{"role": "user", "content": "hi"}], max_tokens=8))


def local(url: str):  # type: ignore[no-untyped-def]
    from citizen.llm.local import LocalProvider

    tpl = config.templates()
    return LocalProvider(tpl.citizen("opus"), tpl.local, tpl.prices, url=url)


def test_the_local_provider_on_llama_server(server: str) -> None:
    """Server mode: a structured call under the json_schema response format, and a tool
    call by native tool calling (no grammar bound on any argument)."""
    llm = local(server)
    reply = llm.complete(Request(messages=[{"role": "user", "content": "Yes or no?"}],
                                 output_schema=PICK, max_tokens=64))
    jsonschema.validate(reply.data, PICK)
    tools = tuple(t.spec() for t in core_tools().values())
    acted = llm.complete(Request(messages=[{"role": "user", "content": "Read README.md"}],
                                 tools=tools, max_tokens=128))
    assert llm.backend.native_tools, "llama-server with --jinja takes native tools"
    assert acted.usage.input_tokens > 0
    specs = {t.name: t for t in tools}
    for c in acted.tool_calls:  # one that may run is a known tool with valid arguments
        if not c.problem:
            jsonschema.validate(dict(c.input), specs[c.name].input_schema)
    if acted.tool_calls:
        assert acted.stop_reason == "tool_use"
    else:
        assert acted.stop_reason in ("end_turn", "stop", "length")


def test_a_server_without_native_tools_gets_the_json_action() -> None:
    """llama-server without --jinja refuses `tools`: the provider says so once and
    uses the grammar-constrained action from then on."""
    with running("--no-jinja") as url:
        llm = local(url)
        tools = tuple(t.spec() for t in core_tools().values())
        acted = llm.complete(Request(messages=[{"role": "user", "content": "Read README.md"}],
                                     tools=tools, max_tokens=256))
        assert llm.backend.native_tools is False
        if acted.tool_calls:  # the JSON action: exactly one call, or the final answer
            (call,) = acted.tool_calls
            assert call.name in {t.name for t in tools} and acted.stop_reason == "tool_use"
        else:
            assert acted.stop_reason == "end_turn"
