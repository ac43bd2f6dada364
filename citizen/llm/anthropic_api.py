"""The Anthropic provider: the official SDK, prompt caching, tool use, structured output.

Importing this module imports the SDK (≈2 s, ≈65 MB): only a wake or a command that
really calls the model may import it. `citizen.llm.make_provider` does so lazily.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Mapping
from typing import Any

import anthropic

from citizen.config import CitizenConfig, ModelPrice, paths, server_mode
from citizen.errors import ProviderError, StructuredOutputError
from citizen.home.spend import DailyCapReached
from citizen.llm.base import Provider, Reply, Request, ToolCall, Usage
from citizen.llm.structured import schema_problem

# The shared prefix (the tools and the system block every citizen sends alike) is read
# by every citizen, one after another: an hour, whatever the citizen's own gap.
SHARED_TTL = "1h"
# The forced tool through which structured output is requested.
RESPOND_TOOL = "respond"
DEFAULT_MAX_RETRIES = 4  # ours, never the SDK's: see _create
# Answers the broker never bills (it releases the reservation of an upstream's error, and
# refuses a rate before reserving): the only ones retried. Not 502/504 - the broker's
# "answer lost" is billed at its worst case - and never a timeout or a broken connection,
# after which the broker may still settle the attempt.
RETRIED = frozenset({408, 429, 500, 503, 529})
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0)  # before each retry, unless retry-after says more
BUDGET_REFUSED = 402  # the broker's answer when a cap would be crossed (never retried)
BROKER_URL = "http://broker"  # citizen.access.client.BASE_URL: the socket, not a host

def _key_file(config: CitizenConfig) -> str:
    """Where the operator puts this citizen's model key: root's file on a server (the
    broker reads it), the home's `.env` in dev mode."""
    if server_mode():
        return f"{paths.operator_secrets_file(config.name)} (the broker's)"
    return str(paths.citizen_env_file(config.name))


_STATUS_FIX = {
    400: "the request was malformed - this is a bug in Experience; report it with the wake log",
    403: "refused - the broker's message says why (a model outside the council, no key "
         "configured, not a citizen), else the key may not use this model",
    404: "no such model - check the council model names in the citizen config",
    413: "the request is too large - lower the context caps",
    429: "rate limited even after retries - lower wake frequency or raise the account's limits",
    529: "the API stayed overloaded after retries - the next wake will try again",
}


# How the API (and servers that speak it, like llama.cpp's) says a prompt does not fit.
_TOO_LONG = re.compile(r"prompt is too long|context (size|length|window)", re.IGNORECASE)


class AnthropicProvider(Provider):
    """Claude through the official SDK."""

    name = "anthropic"
    prompt_cache = True  # one per organisation: the broker's key serves every citizen

    def __init__(
        self,
        config: CitizenConfig,
        prices: Mapping[str, ModelPrice],
        api_key: str,
        *,
        base_url: str = "",
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = 300.0,
        http_client: Any = None,
    ) -> None:
        self.config = config
        self.prices = prices
        self.base_url = base_url
        self.max_retries = max_retries
        # The key is passed explicitly so the SDK never falls back to ambient
        # credentials (profiles, other environment variables) of whoever runs us.
        # `http_client`: the broker's transport (citizen.access.client), which holds the
        # real key; the SDK itself is never patched.
        # max_retries=0: the SDK's own retries happened below the meter, so the broker
        # billed attempts (an abandoned one it still settled) the wake never logged - 6
        # settled against 4 llm_call events on a loaded machine. Retried here instead,
        # only after answers the broker did not bill (RETRIED).
        self.client = anthropic.Anthropic(
            api_key=api_key, base_url=base_url or None, max_retries=0, timeout=timeout_s,
            http_client=http_client,
        )

    def describe(self) -> str:
        where = "the broker" if self.base_url == BROKER_URL else (
            self.base_url or "api.anthropic.com")
        return f"anthropic ({self.config.seat('primary').model} via {where})"

    def _answerer(self) -> str:
        """Who answered a failed call. Through the broker it is the broker, whose message
        names its upstream (any endpoint the operator or a dev environment set) - never
        "the Anthropic API", which a local stand-in's failure was taken for."""
        if self.base_url == BROKER_URL:
            return "the broker"
        return f"the API at {self.base_url}" if self.base_url else "the Anthropic API"

    def price(self, tier: str) -> ModelPrice:
        return self.prices[self.config.seat(tier).model]

    def complete(self, request: Request) -> Reply:
        seat = self.config.seat(request.tier)
        # No temperature: SDK 2.x sends API version 2026-10-21, which rejects every
        # sampling parameter (HTTP 400, even at the default), and the SDK dropped them.
        # The council's temperatures reach the local provider, which takes them.
        kwargs = self._build(request, seat.model)
        started = time.monotonic()
        try:
            message = self._create(kwargs)
        except anthropic.APIStatusError as exc:
            if exc.status_code == BUDGET_REFUSED:  # the broker's cap: the day's work waits
                raise DailyCapReached(f"the broker refused the call: {_short(exc.message)}") \
                    from exc
            fix = _STATUS_FIX.get(exc.status_code) or (
                "the API kept failing after retries - the next wake will try again"
                if exc.status_code >= 500 else "see the message above")
            if exc.status_code == 401:  # the key's file is the broker's on a server
                fix = ("the API key was refused - check ANTHROPIC_API_KEY in "
                       f"{_key_file(self.config)}")
            if exc.status_code == 400 and _TOO_LONG.search(exc.message):
                fix = ("the prompt is longer than the model's context window - lower the "
                       "context caps in the citizen config, or give the server more context")
            raise ProviderError(
                f"{self._answerer()} answered HTTP {exc.status_code} for {seat.model} "
                f"(after up to {self.max_retries} retries): {_short(exc.message)} - {fix}"
            ) from exc
        except anthropic.APIConnectionError as exc:
            raise ProviderError(
                f"cannot reach the Anthropic API at {self.base_url or 'api.anthropic.com'} "
                f"({_short(str(exc))}) - check the network, or ANTHROPIC_BASE_URL / "
                "llm.anthropic_base_url"
            ) from exc
        latency = time.monotonic() - started
        return self._reply(request, message, seat.model, latency)

    def _create(self, kwargs: dict[str, Any]) -> Any:
        """One call, retried up to max_retries times after an answer nobody billed."""
        attempt = 0
        while True:
            try:
                return self.client.messages.create(**kwargs)
            except anthropic.APIStatusError as exc:
                if exc.status_code not in RETRIED or attempt >= self.max_retries:
                    raise
                wait = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
                with contextlib.suppress(ValueError):  # an HTTP date: the backoff's wait
                    wait = max(wait, min(float(exc.response.headers.get("retry-after", 0)), 60))
            time.sleep(wait)  # a backoff: nothing to wait on but time
            attempt += 1

    def _build(self, request: Request, model: str) -> dict[str, Any]:
        system: list[dict[str, Any]] = [{"type": "text", "text": t} for t in request.system]
        # By name: tools open the cached prefix every citizen shares, so the order a
        # caller listed them in must not make two calls with the same tools miss it.
        tools: list[dict[str, Any]] = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
            for t in sorted(request.tools, key=lambda t: t.name)
        ]
        kwargs: dict[str, Any] = {
            "model": model, "max_tokens": request.max_tokens, "messages": list(request.messages),
            # What the call is for, in the broker's ledger (data, never a rule).
            "extra_headers": {"X-Experience-Purpose": request.purpose[:80]},
        }
        if request.output_schema is not None:
            tools.append({
                "name": RESPOND_TOOL,
                "description": "Give your answer in exactly this structure.",
                "input_schema": dict(request.output_schema),
            })
            kwargs["tool_choice"] = {"type": "tool", "name": RESPOND_TOOL}
        _mark(request, tools, system, kwargs["messages"])
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = tools
        return kwargs

    def _reply(self, request: Request, message: Any, model: str, latency: float) -> Reply:
        u = message.usage
        usage = Usage(
            input_tokens=u.input_tokens or 0,
            output_tokens=u.output_tokens or 0,
            cache_write_tokens=getattr(u, "cache_creation_input_tokens", 0) or 0,
            cache_read_tokens=getattr(u, "cache_read_input_tokens", 0) or 0,
            cache_write_1h_tokens=getattr(getattr(u, "cache_creation", None),
                                          "ephemeral_1h_input_tokens", 0) or 0,
        )
        cost = usage.cost(self.prices[model])
        try:
            text, calls, data = self._content(request, message)
        except StructuredOutputError as exc:  # billed all the same: the meter charges it
            raise exc.billed(cost, usage.input_tokens, usage.output_tokens) from None
        return Reply(
            text=text,
            model=message.model or model,
            provider=self.name,
            usage=usage,
            cost_usd=cost,
            tool_calls=calls,
            data=data,
            stop_reason=message.stop_reason or "",
            latency_s=latency,
        )

    @staticmethod
    def _content(request: Request, message: Any) -> tuple[str, tuple[ToolCall, ...], Any]:
        """(text, tool calls, structured data) of a reply."""
        text_parts: list[str] = []
        calls: list[ToolCall] = []
        data: Any = None
        schemas = {t.name: t.input_schema for t in request.tools}
        for block in message.content:
            if block.type == "text":
                text_parts.append(block.text)
            elif block.type == "tool_use":
                payload = dict(block.input) if isinstance(block.input, dict) else block.input
                if request.output_schema is not None and block.name == RESPOND_TOOL:
                    problem = schema_problem(request.output_schema, payload)
                    if problem:
                        raise StructuredOutputError(problem, _json(payload))
                    data = payload
                    continue
                schema = schemas.get(block.name)
                problem = (f"unknown tool '{block.name}'" if schema is None
                           else schema_problem(schema, payload))
                calls.append(ToolCall(block.id, block.name, payload if isinstance(payload, dict)
                                      else {"value": payload}, problem))
        if request.output_schema is not None and data is None:
            raise StructuredOutputError("the reply did not use the respond tool",
                                        "".join(text_parts))
        if message.stop_reason == "max_tokens" and calls:
            # The output limit cut the last call mid-arguments: it must not run.
            last = calls[-1]
            calls[-1] = ToolCall(last.id, last.name, last.input, CUT)
        return "".join(text_parts), tuple(calls), data


def _mark(request: Request, tools: list[dict[str, Any]], system: list[dict[str, Any]],
          messages: list[dict[str, Any]]) -> None:
    """The cache breakpoints, at most the API's four (it caches tools, then system, then
    messages, each prefix up to a marked block): after the shared prefix (the tools and
    the `request.shared` system blocks every citizen sends alike, SHARED_TTL: one
    citizen's write is the next one's read, issue 45); after the citizen's stable blocks
    (its own block, identity, long contexts: the same bytes in every call of a wake and
    of the next wake) at `request.cache_ttl`; after the rest of the system (the wake's
    own contexts); and, in the tool loop, on the conversation's last block, so the next
    call reads all of it. (Identity had an entry of its own before: a changed goal left
    it read. The shared entry took its place - the API allows four - as it is read by
    every citizen, not by one.)
    Not on a structured step: its prefix ends in that step's own schema and is asked
    once, so a cache write (1.25x the input price) would never be read back."""
    if request.output_schema is not None:
        return
    stable = len(system) if request.stable is None else min(request.stable, len(system))
    shared = min(request.shared, stable)
    if shared:
        system[shared - 1]["cache_control"] = _ephemeral(SHARED_TTL)
    if stable > shared:
        system[stable - 1]["cache_control"] = _ephemeral(request.cache_ttl)
    elif tools and not system:
        tools[-1]["cache_control"] = _ephemeral(request.cache_ttl)
    if len(system) > stable:  # 5 minutes: it changes by the next wake
        system[-1]["cache_control"] = _ephemeral("5m")
    last = messages[-1] if messages else None
    if last is not None and len(messages) > 1:  # a conversation under way (not its start)
        content = last["content"]
        blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str)
            else [dict(b) for b in content])
        if blocks and blocks[-1].get("type") in ("text", "tool_result", "tool_use"):
            blocks[-1]["cache_control"] = _ephemeral("5m")
            messages[-1] = {**last, "content": blocks}  # a copy: the loop's stays unmarked


def _ephemeral(ttl: str) -> dict[str, str]:
    """A cache_control mark; the 5-minute one as the API's default (no `ttl` key)."""
    return {"type": "ephemeral"} if ttl != "1h" else {"type": "ephemeral", "ttl": "1h"}


CUT = ("your call was cut at the output limit, so it was not run; shorten it, or write "
       "long content in parts (write_file the first part, then append_file the rest)")


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _json(value: Any) -> str:
    return json.dumps(value, default=str)
