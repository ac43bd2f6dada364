"""The meter every model call of a wake goes through, and how a wake's work ends.

Limits are enforced *before* a call would exceed them: the wake's dollar cap (from the
citizen's budget, with the next call priced at its worst case), the task's number of
calls, and the daily caps (`citizen.home.spend.Daily`). A call that could cross one is
not made: the meter raises a `citizen.errors.LimitReached`, and the loop (or a wake
type's steps) ends with an `Ending` that says which.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from citizen.config import Budget, ModelPrice
from citizen.config.paths import Home
from citizen.errors import LimitReached, ProviderError, StructuredOutputError
from citizen.home import spend
from citizen.home.spend import Daily
from citizen.home.wakelog import WakeLog
from citizen.llm.base import (
    CHARS_PER_TOKEN,
    Provider,
    Reply,
    Request,
    Usage,
    cache_write_1h,
    digest_of,
)


@dataclass
class Ending:
    """How the tool-use loop (or a wake type's steps) ended."""

    # end_turn, task_finished, budget, daily_cap, iterations, no_progress, provider_error
    status: str
    reason: str = ""
    text: str = ""


class BudgetExceeded(LimitReached, ProviderError):
    """The next call could push the wake past its dollar cap; it was not made."""


@dataclass
class Meter:
    """Counts every model call of one wake, enforces the dollar cap, and logs each call."""

    log: WakeLog
    budget: Budget
    ledger: Home | None = None  # whose spend ledger each call is added to (citizen.home.spend)
    daily: Daily | None = None  # the daily caps, checked before each call
    calls_left: int | None = None  # the task's calls still allowed (budget.max_calls_per_task)
    # The council's model per tier (`route_model` in the log when another model answered).
    routes: Mapping[str, str] = field(default_factory=dict)
    spent: float = 0.0
    calls: int = 0  # calls that got a reply (billed)
    attempts: int = 0  # calls sent, answered or not (sent, none answered: no model)
    tokens_in: int = 0
    tokens_out: int = 0
    _logged: dict[str, int] = field(default_factory=dict)
    # A system block as JSON: the blocks are built once a wake and sent on each of its
    # calls, so each is encoded once, not once a call (the contexts: most bytes), for
    # the worst case and the digest alike.
    _encoded: dict[str, str] = field(default_factory=dict)

    def worst_case(self, request: Request, price: ModelPrice,
                   data: dict[str, Any] | None = None) -> float:
        """The most the request could cost: all input written to the cache (the dearest
        way to send it), every output token used. The input is estimated from the request
        as JSON (`estimate_tokens` of `json.dumps(request.to_dict())`), its length summed
        from the rest and each system block's length (`[a, b]`: 2 characters apart).
        `data`: `request.to_dict()` already made (a call makes it once)."""
        rest = json.dumps({**(data or request.to_dict()), "system": []}, default=str)
        blocks = [len(self._json(b)) for b in request.system]
        chars = len(rest) + sum(blocks) + 2 * max(0, len(blocks) - 1)
        per_input = max(price.input, price.cache_write,
                        cache_write_1h(price)  # the shared block's mark is 1 h
                        if request.cache_ttl == "1h" or request.shared else 0.0)
        tokens = math.ceil(chars / CHARS_PER_TOKEN)  # llm.base.estimate_tokens, by length
        return (tokens * per_input + request.max_tokens * price.output) / 1e6

    def _json(self, block: str) -> str:
        encoded = self._encoded.get(block)
        if encoded is None:
            encoded = self._encoded[block] = json.dumps(block, default=str)
        return encoded

    def _digest(self, request: Request, data: dict[str, Any]) -> str:
        """`request.digest()`, its system blocks encoded once a wake (`_json`)."""
        return digest_of(data, [self._json(b) for b in request.system])

    def call(self, llm: Provider, request: Request) -> Reply:
        """Make one model call within the budget, and log it completely enough to replay.

        :raises BudgetExceeded: the call could exceed the wake's cap; nothing was sent.
        :raises DailyCapReached: it could cross a daily cap; nothing was sent.
        """
        data = request.to_dict()  # once a call: the worst case's and the digest's
        worst = self.worst_case(request, llm.price(request.tier), data)
        cap = self.budget.max_usd_per_wake
        if self.spent + worst > cap:
            raise BudgetExceeded(f"the next call could cost ${worst:.4f} and ${self.spent:.4f} "
                                 f"of the ${cap:.2f} wake budget is spent")
        if self.calls_left is not None and self.calls_left <= 0:
            raise BudgetExceeded(f"the task has used its {self.budget.max_calls_per_task} model "
                                 "calls (budget.max_calls_per_task)")
        if self.daily is not None:
            self.daily.check(worst)  # raises DailyCapReached: nothing is sent
        seen = self._logged.get(request.purpose, 0)
        new_messages = list(request.messages)[seen:]
        if request.purpose not in self._logged:
            self.log.event("prompt", purpose=request.purpose,
                           system_blobs=[self.log.blob(b) for b in request.system],
                           tools=[t.name for t in request.tools])
        self._logged[request.purpose] = len(request.messages)
        self.attempts += 1
        try:
            reply = llm.complete(request)
        except StructuredOutputError as exc:
            # A reply that broke its schema was made and billed: it counts against every
            # limit like any other (at its worst case when the provider cannot say).
            cost = exc.cost_usd if exc.cost_usd is not None else worst
            self._count(cost, exc.tokens_in, exc.tokens_out)
            self.log.event("llm_call", purpose=request.purpose,
                           request_digest=self._digest(request, data),
                           new_messages=new_messages, error=exc.problem, raw=exc.raw[:2000],
                           cost_usd=round(cost, 6), tokens_in=exc.tokens_in,
                           tokens_out=exc.tokens_out)
            self._ledger(request, "?", cost, Usage(exc.tokens_in, exc.tokens_out))
            raise
        self._count(reply.cost_usd, reply.usage.input_tokens, reply.usage.output_tokens)
        u = reply.usage
        # `model` is the one that answered (the provider's reply says which: the embedded
        # model answers a tier whose council seat names another); the seat's, if other.
        configured = self.routes.get(request.tier, "")
        routed = {"route_model": configured} if configured not in ("", reply.model) else {}
        self.log.event(
            "llm_call", purpose=request.purpose, tier=request.tier, model=reply.model, **routed,
            tokens_in=u.input_tokens, tokens_out=u.output_tokens,
            cache_read=u.cache_read_tokens, cache_write=u.cache_write_tokens,
            cost_usd=round(reply.cost_usd, 6), latency_s=round(reply.latency_s, 3),
            request_digest=self._digest(request, data), new_messages=new_messages,
            reply=reply.to_dict())
        self._ledger(request, reply.model, reply.cost_usd, u)
        return reply

    def _count(self, cost: float, tokens_in: int, tokens_out: int) -> None:
        self.calls += 1
        if self.calls_left is not None:
            self.calls_left -= 1
        self.spent += cost
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out

    def _ledger(self, request: Request, model: str, cost: float, u: Usage) -> None:
        """The call in the citizen's spend ledger (and the daily caps' 80 % notice)."""
        if self.ledger is None:
            return
        spend.record(self.ledger, wake=self.log.number, wake_type=self.log.wake_type,
                     purpose=request.purpose, tier=request.tier, model=model,
                     tokens_in=u.input_tokens, tokens_out=u.output_tokens,
                     cache_read=u.cache_read_tokens, cache_write=u.cache_write_tokens,
                     cost_usd=round(cost, 6))
        if self.daily is not None:
            self.daily.spent_now()
