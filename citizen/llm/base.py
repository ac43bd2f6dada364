"""The one interface every model provider implements: a `Request` in, a `Reply` out.

Messages use the Anthropic shape (a role and either a string or a list of `text`,
`tool_use` and `tool_result` blocks); providers for other protocols translate.
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from citizen.config import ModelPrice

Message = dict[str, Any]
FREE = ModelPrice(0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: its name, what it does, and its input's JSON schema."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True)
class Request:
    """One model call.

    `system` blocks are stable text placed first so providers can cache them;
    `output_schema` asks for structured output validated against that JSON schema;
    `tier` names the council role whose model serves the call ("primary", "fast", …).
    How a provider may cache (never what is asked, so not in `to_dict`): the first
    `stable` system blocks change rarely (identity, long contexts: None means all of
    them), and stay cached for `cache_ttl` ("5m" or "1h"); the rest change between wakes.
    The first `shared` of them are the same bytes for every citizen (the shared system
    block): with the tools before them, one cache entry the whole civilization reads,
    kept for an hour.
    """

    messages: Sequence[Message]
    system: Sequence[str] = ()
    tools: Sequence[ToolSpec] = ()
    output_schema: Mapping[str, Any] | None = None
    max_tokens: int = 1024
    tier: str = "primary"
    purpose: str = ""
    stable: int | None = None
    cache_ttl: str = "5m"
    shared: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The request as plain JSON-able data (for logs and replay)."""
        return {
            "messages": list(self.messages),
            "system": list(self.system),
            # Each tool as its fields (what `asdict` gave, without deep-copying each
            # schema on every call: the data is encoded at once, never changed).
            "tools": [{"name": t.name, "description": t.description,
                       "input_schema": t.input_schema} for t in self.tools],
            "output_schema": self.output_schema,
            "max_tokens": self.max_tokens,
            "tier": self.tier,
            "purpose": self.purpose,
        }

    def digest(self) -> str:
        """A stable fingerprint of what was asked, so a replay can check it asks the same."""
        return digest_of({**self.to_dict(), "system": []},
                         [json.dumps(b, default=str) for b in self.system])


def digest_of(data: Mapping[str, Any], system: Sequence[str]) -> str:
    """`Request.digest` from the request's data (`to_dict`, its system blocks left out)
    and each system block already encoded as JSON (`json.dumps(block)`): the same bytes as
    encoding the whole with sorted keys, so a wake's meter encodes its blocks - most of
    a request - once a wake, not once a call."""
    fields = {k: json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)
              for k, v in data.items() if k != "system"}
    fields["system"] = "[" + ",".join(system) + "]"
    body = "{" + ",".join(f"{json.dumps(k)}:{fields[k]}" for k in sorted(fields)) + "}"
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for. `problem` is set when its input broke the tool's schema."""

    id: str
    name: str
    input: Mapping[str, Any]
    problem: str = ""


@dataclass(frozen=True)
class Usage:
    """Tokens of each kind a call used. `cache_write_tokens` counts every cache write;
    `cache_write_1h_tokens` the part of them written with the 1-hour lifetime."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_1h_tokens: int = 0

    def cost(self, price: ModelPrice) -> float:
        """US dollars for this usage at `price` (per million tokens): a 5-minute cache
        write at `price.cache_write`, a 1-hour one at twice the input price."""
        long = min(self.cache_write_1h_tokens, self.cache_write_tokens)
        return (
            self.input_tokens * price.input
            + self.output_tokens * price.output
            + (self.cache_write_tokens - long) * price.cache_write
            + long * cache_write_1h(price)
            + self.cache_read_tokens * price.cache_read
        ) / 1_000_000


CACHE_WRITE_1H = 2.0  # a 1-hour cache write costs twice the base input price (Anthropic)


def cache_write_1h(price: ModelPrice) -> float:
    """US dollars per million tokens written to the cache for an hour."""
    return CACHE_WRITE_1H * price.input


@dataclass(frozen=True)
class Reply:
    """What a model answered, what it cost and how long it took."""

    text: str
    model: str
    provider: str
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    tool_calls: tuple[ToolCall, ...] = ()
    data: Any = None
    stop_reason: str = ""
    latency_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The reply as plain JSON-able data (for logs and replay): `asdict`'s fields and
        order, without deep-copying `data` and each tool input on every call (they are
        encoded at once, never changed)."""
        return {"text": self.text, "model": self.model, "provider": self.provider,
                "usage": self.usage.__dict__.copy(), "cost_usd": self.cost_usd,
                "tool_calls": tuple(t.__dict__.copy() for t in self.tool_calls), "data": self.data,
                "stop_reason": self.stop_reason, "latency_s": self.latency_s}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Reply:
        """Rebuild a reply recorded by `to_dict`."""
        return cls(
            text=raw["text"],
            model=raw["model"],
            provider=raw["provider"],
            usage=Usage(**raw.get("usage", {})),
            cost_usd=raw.get("cost_usd", 0.0),
            tool_calls=tuple(ToolCall(**t) for t in raw.get("tool_calls", ())),
            data=raw.get("data"),
            stop_reason=raw.get("stop_reason", ""),
            latency_s=raw.get("latency_s", 0.0),
        )


# Characters per token over everything in templates/, measured with the Gemma 3
# tokenizer: prose prompts 3.7-4.4, JSON and YAML 2.1-2.8, all together 3.27.
# Used only where no tokenizer is at hand; errs towards counting more tokens.
CHARS_PER_TOKEN = 3.2


def estimate_tokens(text: str) -> int:
    """A calibrated estimate of a text's token count (no tokenizer needed)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class Provider(ABC):
    """A model provider. Implementations answer one `Request` at a time."""

    name: str = "provider"
    # Generations the model's server takes at once, across every citizen that shares it
    # (ThoughtStream admission control); the local llama.cpp server serves one at a time.
    max_concurrent: int = 4
    # Whether the provider keeps a prompt cache that one citizen's call can write and the
    # next citizen's read (the API's, per organisation): then a wake offers its whole
    # stable tool catalogue, the prefix every citizen shares, and no model picks tools.
    prompt_cache: bool = False

    @abstractmethod
    def complete(self, request: Request) -> Reply:
        """Answer the request.

        :raises ProviderError: the provider could not answer (after its own retries).
        :raises StructuredOutputError: structured output did not match `output_schema`.
        """

    def describe(self) -> str:
        """One line saying which model and where, for the operator."""
        return self.name

    def price(self, tier: str) -> ModelPrice:
        """What a call on `tier` costs per million tokens (free unless overridden)."""
        return FREE

    def count_tokens(self, text: str) -> int:
        """Tokens in `text` as this provider counts them; an estimate unless overridden."""
        return estimate_tokens(text)
