"""What a Messages API call may cost before it is sent, and what it did cost after.

The worst case of a request is a safe upper bound, never a guess: every input token
priced at the dearer of the input and cache-write prices, and `max_tokens` of output.
Input tokens are bounded by the request's bytes (a token is at least one byte of its
UTF-8 text), which holds only for text: content the bound cannot cover - images,
documents, server-side tools that bill per use - is refused. When the byte bound would
cross a cap, the upstream's free count-tokens endpoint gives the exact input count.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from citizen.config import ModelPrice
from citizen.errors import CitizenError
from citizen.llm.base import Usage, cache_write_1h

# Content blocks whose tokens the bytes bound (text of the request's JSON).
_TEXT_BLOCKS = {"text", "tool_use", "tool_result", "thinking", "redacted_thinking"}
# Request keys the broker forwards; anything else might bill in ways it cannot bound.
FORWARDED_KEYS = {"model", "messages", "system", "max_tokens", "tools", "tool_choice",
                  "stop_sequences", "stream", "metadata", "temperature", "top_p", "top_k",
                  "thinking"}
COUNT_KEYS = ("model", "messages", "system", "tools", "tool_choice", "thinking")
# Betas forwarded: none changes what a call is billed per token. Any other is refused -
# `context-1m-*` bills input past 200K tokens at 2x and output at 1.5x the prices here.
ALLOWED_BETAS = frozenset({"interleaved-thinking-2025-05-14", "token-efficient-tools-2025-02-19",
                           "fine-grained-tool-streaming-2025-05-14", "prompt-caching-2024-07-31",
                           "output-128k-2025-02-19"})
# What the API adds to a request with tools, beyond its bytes: a system prompt about
# them (346 tokens on Claude 4 models, by Anthropic's pricing page) and each
# definition's framing - counted generously, the worst case must never fall short.
TOOL_PROMPT_TOKENS, PER_TOOL_TOKENS = 1024, 64
# Parsed requests in memory at once: JSON of tiny values takes ~26 bytes of Python
# objects per byte, so a few parsed at once would take the broker past its MemoryMax.
_PARSING = threading.BoundedSemaphore(2)


class Unbounded(CitizenError, ValueError):
    """A request whose cost the broker cannot bound; it is refused, not forwarded."""


@dataclass(frozen=True)
class Call:
    """A checked request: its model, its output bound, whether it streams, how many tools
    it gives, and `wire` - the request as forwarded, encoded again from what was checked
    (never the caller's bytes: with a key twice, parsers differ on which one counts)."""

    model: str
    max_tokens: int
    stream: bool
    tools: int = 0
    wire: bytes = field(default=b"", repr=False)
    long_cache: bool = False  # a 1-hour cache_control mark: its writes cost 2x the input


def parse(raw: bytes) -> Call:
    """:raises Unbounded: not a request whose worst case the broker can bound."""
    with _PARSING:  # the parsed tree is dropped before the semaphore is let go
        try:
            return _parse(raw)
        except RecursionError:  # nested past what json (or the checks) can recurse
            raise Unbounded("the request is nested too deeply") from None


def _parse(raw: bytes) -> Call:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Unbounded(f"the request is not JSON ({exc})") from exc
    if not isinstance(body, dict):
        raise Unbounded("the request must be a JSON object")
    extra = sorted(set(body) - FORWARDED_KEYS)
    if extra:
        raise Unbounded(f"the broker does not forward {', '.join(extra)}")
    model, max_tokens = body.get("model"), body.get("max_tokens")
    if not isinstance(model, str) or not model:
        raise Unbounded("the request names no model")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise Unbounded("max_tokens must be a positive integer")
    tools = body.get("tools") or []
    ttls: set[str] = set()
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") not in (None, "custom"):
            raise Unbounded("only the caller's own tools are forwarded, not server tools "
                            "(they bill per use)")
        _check_cache(tool, ttls)
    for message in body.get("messages") or []:
        _check_blocks(message.get("content") if isinstance(message, dict) else None, ttls)
    _check_blocks(body.get("system"), ttls)
    return Call(model, max_tokens, body.get("stream") is True, len(tools),
                json.dumps(body).encode(), long_cache="1h" in ttls)


def check_betas(headers: list[str]) -> None:
    """:raises Unbounded: an `anthropic-beta` named that may bill past the worst case."""
    named = {b.strip() for value in headers for b in value.split(",") if b.strip()}
    refused = sorted(named - ALLOWED_BETAS)
    if refused:
        raise Unbounded(f"the broker does not forward the beta {', '.join(refused)} (it may "
                        "bill more than it prices; it forwards "
                        f"{', '.join(sorted(ALLOWED_BETAS))})")


# The versions whose billing the worst case was made for: the API's long-standing one and
# the one the SDK in use sends (anthropic 2.x: 2026-10-21).
API_VERSIONS = {"2023-06-01", "2026-10-21"}


def check_version(value: str | None) -> None:
    """:raises Unbounded: an `anthropic-version` the broker has not priced."""
    if value is not None and value.strip() not in API_VERSIONS:
        raise Unbounded(f"the broker forwards anthropic-version "
                        f"{', '.join(sorted(API_VERSIONS))} only, not {value.strip()[:40]!r}")


CACHE_TTLS = ("5m", "1h")  # the lifetimes whose write price the broker knows


def _check_cache(item: dict[str, Any], ttls: set[str]) -> None:
    """Collect a block's cache lifetime; a 1-hour write costs 2x the input price, which
    the worst case (`Call.long_cache`) and the settlement (`Usage.cost`) count."""
    mark = item.get("cache_control")
    if mark is None:
        return
    if not isinstance(mark, dict) or mark.get("type") != "ephemeral" \
            or mark.get("ttl", "5m") not in CACHE_TTLS:
        raise Unbounded("cache_control must be {\"type\": \"ephemeral\"} with a ttl of "
                        f"{' or '.join(CACHE_TTLS)} (others may bill more than the broker "
                        "prices)")
    ttls.add(str(mark.get("ttl", "5m")))


def _check_blocks(content: Any, ttls: set[str]) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise Unbounded("message content must be text or a list of blocks")
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in _TEXT_BLOCKS:
            raise Unbounded(f"content blocks of type {kind!r} are not forwarded (their "
                            "tokens cannot be bounded from the request's size)")
        _check_cache(block, ttls)
        if kind == "tool_result":
            _check_blocks(block.get("content"), ttls)


def worst_usd(input_tokens: int, call: Call, price: ModelPrice) -> float:
    """The most a call with at most `input_tokens` of input can cost."""
    per_input = max(price.input, price.cache_write,
                    cache_write_1h(price) if call.long_cache else 0.0)
    if call.tools:
        input_tokens += TOOL_PROMPT_TOKENS + PER_TOOL_TOKENS * call.tools
    return (input_tokens * per_input + call.max_tokens * price.output) / 1e6


def cost_usd(usage: Usage, price: ModelPrice) -> float:
    return usage.cost(price)


def count_body(call: Call) -> bytes:
    """The count-tokens request for `call` (only the keys that endpoint takes)."""
    with _PARSING:
        body = json.loads(call.wire)
        return json.dumps({k: body[k] for k in COUNT_KEYS if k in body}).encode()


def usage_of(body: bytes) -> Usage | None:
    """The usage a (non-streamed) response reports; None when it says none."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None
    return _usage(data.get("usage")) if isinstance(data, dict) else None


def _usage(raw: Any, base: Usage | None = None) -> Usage | None:
    if not isinstance(raw, dict):
        return base

    def n(key: str, before: int) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and value >= 0 else before

    b = base or Usage()
    created = raw.get("cache_creation")
    long = created.get("ephemeral_1h_input_tokens") if isinstance(created, dict) else None
    return Usage(n("input_tokens", b.input_tokens), n("output_tokens", b.output_tokens),
                 n("cache_creation_input_tokens", b.cache_write_tokens),
                 n("cache_read_input_tokens", b.cache_read_tokens),
                 long if isinstance(long, int) and long >= 0 else b.cache_write_1h_tokens)


class StreamUsage:
    """Follows a streamed response's server-sent events for its usage: `message_start`
    carries the input side, each `message_delta` the output tokens so far."""

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.finished = False
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                self._event(line[5:].strip())

    def _event(self, payload: bytes) -> None:
        try:
            event = json.loads(payload)
        except (UnicodeDecodeError, ValueError):
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self.usage = _usage(event["message"].get("usage"), self.usage)
        elif kind == "message_delta":
            self.usage = _usage(event.get("usage"), self.usage)
        elif kind == "message_stop":
            self.finished = True
