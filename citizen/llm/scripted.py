"""A scripted provider: answers from a list given in advance, recording every request.

For tests and benchmarks of everything above the provider (wakes, tools, budgets),
with zero latency and no network. It implements the same interface as the real
providers; it never stands in for the SDK itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from citizen.config import ModelPrice
from citizen.errors import ProviderError
from citizen.llm.base import FREE, Provider, Reply, Request
from citizen.llm.structured import parse_json

Script = Reply | Callable[[Request], Reply]


class ScriptedProvider(Provider):
    """Hands out scripted replies in order; a callable entry computes its reply."""

    name = "scripted"

    def __init__(self, script: Iterable[Script] = (), default: Script | None = None,
                 price: ModelPrice = FREE) -> None:
        self.script = list(script)
        self.default = default
        self.requests: list[Request] = []
        self.price_per_mtok = price

    def price(self, tier: str) -> ModelPrice:
        return self.price_per_mtok

    def complete(self, request: Request) -> Reply:
        self.requests.append(request)
        if self.script:
            entry = self.script.pop(0)
        elif self.default is not None:
            entry = self.default
        else:
            raise ProviderError("the scripted provider ran out of replies")
        reply = entry(request) if callable(entry) else entry
        if request.output_schema is not None and reply.data is None:
            reply = replace(reply, data=parse_json(reply.text, request.output_schema))
        return reply
