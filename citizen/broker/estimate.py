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
from dataclasses import dataclass, field
from typing import Any

from citizen.config import ModelPrice
from citizen.llm.base import Usage

# Content blocks whose tokens the bytes bound (text of the request's JSON).
_TEXT_BLOCKS = {"text", "tool_use", "tool_result", "thinking", "redacted_thinking"}
# Request keys the broker forwards; anything else might bill in ways it cannot bound.
FORWARDED_KEYS = {"model", "messages", "system", "max_tokens", "tools", "tool_choice",
                  "stop_sequences", "stream", "metadata", "temperature", "top_p", "top_k",
                  "thinking"}
COUNT_KEYS = ("model", "messages", "system", "tools", "tool_choice", "thinking")


class Unbounded(ValueError):
    """A request whose cost the broker cannot bound; it is refused, not forwarded."""


@dataclass(frozen=True)
class Call:
    """A parsed request: its model, its output bound, and whether it streams."""

    model: str
    max_tokens: int
    stream: bool
    body: dict[str, Any] = field(repr=False)


def parse(raw: bytes) -> Call:
    """:raises Unbounded: not a request whose worst case the broker can bound."""
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
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict) or tool.get("type") not in (None, "custom"):
            raise Unbounded("only the caller's own tools are forwarded, not server tools "
                            "(they bill per use)")
    for message in body.get("messages") or []:
        _check_blocks(message.get("content") if isinstance(message, dict) else None)
    _check_blocks(body.get("system"))
    return Call(model, max_tokens, body.get("stream") is True, body)


def _check_blocks(content: Any) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise Unbounded("message content must be text or a list of blocks")
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in _TEXT_BLOCKS:
            raise Unbounded(f"content blocks of type {kind!r} are not forwarded (their "
                            "tokens cannot be bounded from the request's size)")
        if kind == "tool_result":
            _check_blocks(block.get("content"))


def worst_usd(input_tokens: int, call: Call, price: ModelPrice) -> float:
    """The most a call with at most `input_tokens` of input can cost."""
    per_input = max(price.input, price.cache_write)
    return (input_tokens * per_input + call.max_tokens * price.output) / 1e6


def cost_usd(usage: Usage, price: ModelPrice) -> float:
    return usage.cost(price)


def count_body(call: Call) -> bytes:
    """The count-tokens request for `call` (only the keys that endpoint takes)."""
    return json.dumps({k: call.body[k] for k in COUNT_KEYS if k in call.body}).encode()


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
    return Usage(n("input_tokens", b.input_tokens), n("output_tokens", b.output_tokens),
                 n("cache_creation_input_tokens", b.cache_write_tokens),
                 n("cache_read_input_tokens", b.cache_read_tokens))


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
