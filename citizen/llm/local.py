"""The local provider: the embedded llama.cpp model, or any OpenAI-compatible server.

In-process it runs Gemma 3 270M (a *base* model) through `llama-cpp-python`: the file
has no chat template, so `chat_format="gemma"` is required, and that format drops
system messages, so our stable system blocks go into the first user turn. Every
structured call is constrained by a JSON schema whose strings and lists are bounded,
and `max_tokens` is capped, so decoding always terminates.

Given `llm.local_url` (or `EXPERIENCE_LOCAL_URL`) it talks to a server instead -
llama.cpp's server, Ollama, vLLM - with the same requests over HTTP.

Tools: over HTTP, native tool calling first (OpenAI `tools`, `citizen.llm.openai_wire`:
no bound on any argument, so nothing arrives cut); a server that refuses `tools`
(llama.cpp's server without `--jinja`, an old server) is remembered as such and gets
what the embedded model always gets - a small model has no native tool calling, so a
call with tools asks for one JSON "action" (a tool and its arguments, or a final
answer) under the same schema constraint, and turns it into a `ToolCall`; an argument
that filled its grammar bound is refused, never run.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, cast

from citizen.config import CitizenConfig, LocalModelSettings, ModelPrice
from citizen.errors import ProviderUnavailable, StructuredOutputError
from citizen.llm import openai_wire
from citizen.llm.base import Provider, Reply, Request, ToolCall, ToolSpec, Usage
from citizen.llm.model_file import ensure_model
from citizen.llm.model_server import ModelServer
from citizen.llm.structured import (
    clamp_numbers,
    fit_schema,
    minimum_tokens,
    parse_json,
    schema_problem,
)

FINAL = "none"  # the pseudo-tool a model picks to answer instead of calling a tool
_ANSWER_CHARS = 1000


class _Backend(Protocol):
    where: str

    def chat(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def count_tokens(self, text: str) -> int | None: ...


class _InProcess:
    """llama.cpp in this process. One loaded model per file per process, shared."""

    _loaded: dict[Path, Any] = {}  # noqa: RUF012 - a process-wide cache on purpose
    _guard = threading.Lock()

    def __init__(self, model_file: Path, settings: LocalModelSettings) -> None:
        self.where = f"llama.cpp in-process ({model_file.name})"
        with self._guard:
            llm = self._loaded.get(model_file)
            if llm is None:
                try:
                    from llama_cpp import Llama  # noqa: PLC0415 - optional extra, ~1 s to load
                except ImportError as exc:
                    raise ProviderUnavailable(
                        "llama-cpp-python is not installed - run scripts/bootstrap.sh "
                        "(or pip install '.[local]'), or set an ANTHROPIC_API_KEY") from exc
                _quiet_llama_log()
                llm = Llama(
                    model_path=str(model_file),
                    n_ctx=settings.context_tokens,
                    # llama-cpp-python defaults to half the cores; 0 means all of them.
                    n_threads=settings.threads or os.cpu_count() or 1,
                    chat_format="gemma",  # the GGUF has no chat template of its own
                    verbose=False,
                )
                self._loaded[model_file] = llm
        self.llm = llm
        self.lock = threading.Lock()  # a llama.cpp context serves one call at a time

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        body = dict(body)
        body.pop("model", None)
        fmt = body.pop("response_format", None)
        if fmt is not None:
            schema = fmt["json_schema"]["schema"]
            body["response_format"] = {"type": "json_object", "schema": schema}
        with self.lock:
            result = self.llm.create_chat_completion(**body)
        return cast(dict[str, Any], result)

    def count_tokens(self, text: str) -> int | None:
        return len(self.llm.tokenize(text.encode(), add_bos=False))


_LOG_CALLBACK: Any = None


def _quiet_llama_log() -> None:
    """Keep llama.cpp's own log to errors: its info lines would garble CLI output."""
    global _LOG_CALLBACK  # noqa: PLW0603 - ctypes callbacks must outlive the library's use
    if _LOG_CALLBACK is not None:
        return
    import llama_cpp  # noqa: PLC0415 - optional extra

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def _log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        # GGML_LOG_LEVEL_ERROR only; the SWA-cache notice is logged as an error
        # at every load although it is informational.
        if level == 3 and b"full-size SWA cache" not in text:
            sys.stderr.write(text.decode("utf-8", errors="replace"))

    _LOG_CALLBACK = _log
    llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))


class LocalProvider(Provider):
    """A local model: llama.cpp in-process by default, or an OpenAI-compatible server by URL."""

    name = "local"

    def __init__(
        self,
        config: CitizenConfig,
        settings: LocalModelSettings,
        prices: Mapping[str, ModelPrice],
        *,
        url: str = "",
        model_file: Path | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        self.max_concurrent = settings.max_concurrent_generations
        self.price_table = prices.get(settings.model, ModelPrice(0, 0, 0, 0))
        if url:
            self.backend: _Backend = ModelServer(
                url, settings.request_timeout_s if timeout_s is None else timeout_s)
        else:
            if model_file is None:
                model_file = ensure_model()
            self.backend = _InProcess(model_file, settings)

    def describe(self) -> str:
        return f"local ({self.settings.model} via {self.backend.where})"

    def price(self, tier: str) -> ModelPrice:
        return self.price_table

    def count_tokens(self, text: str) -> int:
        counted = self.backend.count_tokens(text)
        return counted if counted is not None else super().count_tokens(text)

    def complete(self, request: Request) -> Reply:
        schema: Mapping[str, Any] | None = request.output_schema
        tools = list(request.tools)
        if (tools and schema is None and isinstance(self.backend, ModelServer)
                and self.backend.native_tools):
            native = self._native(self.backend, request, tools)
            if native is not None:
                return native
        if schema is None and tools:
            schema = action_schema(tools)
        messages = _to_chat(request, tools)
        max_tokens = min(request.max_tokens, self.settings.max_output_tokens)
        body: dict[str, Any] = {
            "model": self.settings.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": self.config.seat(request.tier).temperature,
        }
        if schema is not None:
            # The grammar's worst case fits the token cap, so the JSON always closes. A cap
            # too small for even one-character strings is raised to the least that fits.
            max_tokens = max(max_tokens, minimum_tokens(schema))
            body["max_tokens"] = max_tokens
            fitted = fit_schema(schema, max_tokens)
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": fitted, "strict": True},
            }
        started = time.monotonic()
        result = self.backend.chat(body)
        latency = time.monotonic() - started
        choice = result["choices"][0]
        text = choice["message"].get("content") or ""
        raw_usage = result.get("usage") or {}
        usage = Usage(input_tokens=raw_usage.get("prompt_tokens", 0),
                      output_tokens=raw_usage.get("completion_tokens", 0))
        reply = Reply(
            text=text,
            model=self.settings.model,
            provider=self.name,
            usage=usage,
            cost_usd=usage.cost(self.price_table),
            stop_reason=choice.get("finish_reason") or "",
            latency_s=latency,
        )
        try:
            if request.output_schema is not None:
                return _with(reply, data=parse_json(text, request.output_schema, clamp=True))
            if tools:
                return _as_action(reply, text, tools, result.get("id", "local"),
                                  fitted if schema is not None else None)
        except StructuredOutputError as exc:  # the tokens were spent all the same
            raise exc.billed(reply.cost_usd, usage.input_tokens, usage.output_tokens) from None
        return reply


    def _native(self, server: ModelServer, request: Request,
                tools: list[ToolSpec]) -> Reply | None:
        """A tool-loop call with OpenAI `tools`; None if the server does not take them."""
        max_tokens = min(request.max_tokens, self.settings.max_output_tokens)
        body = {"model": self.settings.model, "messages": openai_wire.messages(request),
                "max_tokens": max_tokens, "tools": openai_wire.tools_param(tools),
                "tool_choice": "auto",
                "temperature": self.config.seat(request.tier).temperature}
        started = time.monotonic()
        result = server.chat_tools(body)
        if result is None:
            return None
        choice = result["choices"][0]
        message = choice.get("message") or {}
        finish = choice.get("finish_reason") or ""
        raw_usage = result.get("usage") or {}
        usage = Usage(input_tokens=raw_usage.get("prompt_tokens", 0),
                      output_tokens=raw_usage.get("completion_tokens", 0))
        calls = openai_wire.calls(message, tools, finish, max_tokens)
        return Reply(text="" if calls else str(message.get("content") or ""),
                     model=self.settings.model, provider=self.name, usage=usage,
                     cost_usd=usage.cost(self.price_table), tool_calls=calls,
                     stop_reason="tool_use" if calls else (finish or "end_turn"),
                     latency_s=time.monotonic() - started)


def action_schema(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """One JSON "action": a tool with its arguments, or a final answer."""
    options: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {"tool": {"const": t.name}, "args": dict(t.input_schema)},
            "required": ["tool", "args"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    options.append({
        "type": "object",
        "properties": {"tool": {"const": FINAL},
                       "answer": {"type": "string", "maxLength": _ANSWER_CHARS}},
        "required": ["tool", "answer"],
        "additionalProperties": False,
    })
    return {"anyOf": options}


def _cut_strings(fitted: Mapping[str, Any] | None, name: str, args: Mapping[str, Any]) -> str:
    """Why the call's arguments cannot be trusted whole ("" when they can): a string that
    filled the bound the grammar gave it was most likely cut there, mid-word or
    mid-quote - running a truncated command is worse than refusing it."""
    if fitted is None:
        return ""
    option = next((o for o in fitted.get("anyOf", ())
                   if o.get("properties", {}).get("tool", {}).get("const") == name), None)
    props = (option or {}).get("properties", {}).get("args", {}).get("properties", {})
    for arg, value in args.items():
        bound = props.get(arg, {}).get("maxLength")
        if isinstance(value, str) and bound is not None and len(value) >= int(bound):
            return (f"your {arg} was cut at {bound} characters by the output limit, so it "
                    "was not run; shorten it, or write long content in parts (write_file "
                    "the first part, then append_file the rest)")
    return ""


def _as_action(reply: Reply, text: str, tools: Sequence[ToolSpec], call_id: str,
               fitted: Mapping[str, Any] | None = None) -> Reply:
    try:
        action = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        raise StructuredOutputError(f"not valid JSON ({exc.msg})", text) from exc
    if not isinstance(action, dict):
        raise StructuredOutputError("expected a JSON object", text)
    name = action.get("tool")
    if name == FINAL:
        return _with(reply, text=str(action.get("answer", "")), stop_reason="end_turn")
    spec = next((t for t in tools if t.name == name), None)
    args = action.get("args")
    if not isinstance(args, dict):
        args = {}
    if spec is not None:
        args = clamp_numbers(spec.input_schema, args)
    problem = f"unknown tool '{name}'" if spec is None else (
        schema_problem(spec.input_schema, args) or _cut_strings(fitted, str(name), args))
    call = ToolCall(id=f"{call_id}-0", name=str(name), input=args, problem=problem)
    return _with(reply, text="", tool_calls=(call,), stop_reason="tool_use")


def _with(reply: Reply, **changes: Any) -> Reply:
    return replace(reply, **changes)


def _flatten(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            parts.append(block["text"])
        elif kind == "tool_use":
            parts.append(f"[I called {block['name']} with {json.dumps(block['input'])}]")
        elif kind == "tool_result":
            parts.append(f"[Result of that call: {_flatten(block.get('content', ''))}]")
    return "\n".join(parts)


def _to_chat(request: Request, tools: Sequence[ToolSpec]) -> list[dict[str, str]]:
    """Anthropic-shaped messages → alternating user/assistant turns of plain text."""
    turns: list[dict[str, str]] = []
    for message in request.messages:
        text = _flatten(message["content"])
        if turns and turns[-1]["role"] == message["role"]:
            turns[-1]["content"] += "\n\n" + text
        else:
            turns.append({"role": message["role"], "content": text})
    preface = list(request.system)
    if tools:
        listing = "\n".join(f"- {t.name}: {t.description}" for t in tools)
        preface.append(f"You may call one tool, or answer with tool \"{FINAL}\".\n"
                       f"Tools:\n{listing}")
    if request.output_schema is not None or tools:
        suffix = "Answer with JSON only."
        if turns and turns[-1]["role"] == "user":
            turns[-1]["content"] += "\n\n" + suffix
        else:
            turns.append({"role": "user", "content": suffix})
    if preface:
        head = "\n\n".join(preface)
        if turns and turns[0]["role"] == "user":
            turns[0]["content"] = head + "\n\n" + turns[0]["content"]
        else:
            turns.insert(0, {"role": "user", "content": head})
    return turns
