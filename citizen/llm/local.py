"""The local provider: the embedded llama.cpp model, or any OpenAI-compatible server.

In-process it runs Gemma 3 270M (a *base* model) through `llama-cpp-python`: the file
has no chat template, so `chat_format="gemma"` is required, and that format drops
system messages, so our stable system blocks go into the first user turn. Every
structured call is constrained by a JSON schema whose strings and lists are bounded,
and `max_tokens` is capped, so decoding always terminates.

Given `llm.local_url` (or `EXPERIENCE_LOCAL_URL`) it talks to a server instead -
llama.cpp's server, Ollama, vLLM - with the same requests over HTTP.

Tools: a small model has no native tool calling, so a call with tools asks for one
JSON "action" (a tool and its arguments, or a final answer) under the same schema
constraint, and turns it into a `ToolCall`.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, cast

from citizen.config import CitizenConfig, LocalModelSettings, ModelPrice
from citizen.errors import ProviderError, ProviderUnavailable, StructuredOutputError
from citizen.llm.base import Provider, Reply, Request, ToolCall, ToolSpec, Usage
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


class _Http:
    """An OpenAI-compatible `/v1/chat/completions` endpoint."""

    def __init__(self, url: str, timeout_s: float) -> None:
        base = url.rstrip("/")
        self.endpoint = base + ("/chat/completions" if base.endswith("/v1") else
                                "/v1/chat/completions")
        self.where = self.endpoint
        self.timeout_s = timeout_s
        # OpenAI's `json_schema` form is the standard (vLLM, Ollama, llama.cpp's
        # server); llama-cpp-python's own server only knows `json_object` + schema.
        self.legacy_json = False

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        fmt = body.get("response_format")
        if fmt is not None and self.legacy_json:
            body = {**body, "response_format": {"type": "json_object",
                                                "schema": fmt["json_schema"]["schema"]}}
        try:
            return self._post(body)
        except _Refused as exc:
            # A server that does not know the json_schema form says so about
            # response_format (llama-cpp-python's server answers 500 for it).
            if fmt is None or self.legacy_json or "response_format" not in exc.detail:
                raise ProviderError(exc.message) from exc
            self.legacy_json = True
            return self.chat(body)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        req = urllib.request.Request(  # noqa: S310 - the operator configures this URL
            self.endpoint, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310
                result: dict[str, Any] = json.load(resp)
                return result
        except urllib.error.HTTPError as exc:
            detail = exc.read(2000).decode(errors="replace")
            raise _Refused(exc.code, detail, self.endpoint) from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise ProviderError(
                f"cannot reach the model server at {self.endpoint} ({exc}) - start it, or "
                "clear llm.local_url to use the embedded model") from exc

    def count_tokens(self, text: str) -> int | None:
        return None


class _Refused(Exception):
    """The server answered with an HTTP error."""

    def __init__(self, code: int, detail: str, endpoint: str) -> None:
        self.detail = detail
        self.message = (f"the model server at {endpoint} answered HTTP {code}: {detail[:300]} "
                        "- check llm.local_url and that the server runs a chat model")
        super().__init__(self.message)


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
        timeout_s: float = 300.0,
    ) -> None:
        self.config = config
        self.settings = settings
        self.max_concurrent = settings.max_concurrent_generations
        self.price_table = prices.get(settings.model, ModelPrice(0, 0, 0, 0))
        if url:
            self.backend: _Backend = _Http(url, timeout_s)
        else:
            if model_file is None:
                from citizen.llm.model_file import ensure_model  # noqa: PLC0415

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
        if request.output_schema is not None:
            return _with(reply, data=parse_json(text, request.output_schema, clamp=True))
        if tools:
            return _as_action(reply, text, tools, result.get("id", "local"),
                              fitted if schema is not None else None)
        return reply


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
