"""The tool-use loop of a wake, and the meter every model call of a wake goes through.

Limits are enforced *before* a call would exceed them: the dollar cap (from the
citizen's budget, with the next call priced at its worst case) and the iteration
cap.

Tool results are never stale. Only a tool that says so (`Tool.cacheable`: a pure read of
state the wake's own calls change) is answered from a cache, and any call of a tool that
may change state (a write, a shell command, a test run, a dynamic tool: every tool
without `Tool.reads`) empties it. The breaker ends a wake when the
same call gets the same result a third time with no change of state in between:
re-reading after an edit, or re-running tests after a fix, is progress; so is polling
whose result changes.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from citizen.config import Budget, ModelPrice
from citizen.config.paths import Home
from citizen.errors import ProviderError, StructuredOutputError
from citizen.home import spend
from citizen.home.spend import Daily, DailyCapReached
from citizen.home.wakelog import WakeLog
from citizen.llm.base import Provider, Reply, Request, ToolCall, Usage, estimate_tokens
from citizen.tools.base import Tool, ToolEnv, ToolFailure
from citizen.wake import prompt
from citizen.wake.types.base import Ending
from shared.errors import SharedError

NO_PROGRESS_REPEATS = 3
_SUMMARY = 300


class BudgetExceeded(ProviderError):
    """The next call could push the wake past its dollar cap; it was not made."""


@dataclass
class Meter:
    """Counts every model call of one wake, enforces the dollar cap, and logs each call."""

    log: WakeLog
    budget: Budget
    ledger: Home | None = None  # whose spend ledger each call is added to (citizen.home.spend)
    daily: Daily | None = None  # the daily caps, checked before each call
    calls_left: int | None = None  # the task's calls still allowed (budget.max_calls_per_task)
    spent: float = 0.0
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    _logged: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def worst_case(request: Request, price: ModelPrice) -> float:
        """The most the request could cost: all input written to the cache (the dearest
        way to send it), every output token used."""
        body = json.dumps(request.to_dict(), default=str)
        per_input = max(price.input, price.cache_write)
        return (estimate_tokens(body) * per_input + request.max_tokens * price.output) / 1e6

    def call(self, llm: Provider, request: Request) -> Reply:
        """Make one model call within the budget, and log it completely enough to replay.

        :raises BudgetExceeded: the call could exceed the wake's cap; nothing was sent.
        :raises DailyCapReached: it could cross a daily cap; nothing was sent.
        """
        worst = self.worst_case(request, llm.price(request.tier))
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
        try:
            reply = llm.complete(request)
        except StructuredOutputError as exc:
            # A reply that broke its schema was made and billed: it counts against every
            # limit like any other (at its worst case when the provider cannot say).
            cost = exc.cost_usd if exc.cost_usd is not None else worst
            self._count(cost, exc.tokens_in, exc.tokens_out)
            self.log.event("llm_call", purpose=request.purpose, request_digest=request.digest(),
                           new_messages=new_messages, error=exc.problem, raw=exc.raw[:2000],
                           cost_usd=round(cost, 6), tokens_in=exc.tokens_in,
                           tokens_out=exc.tokens_out)
            self._ledger(request, "?", cost, Usage(exc.tokens_in, exc.tokens_out))
            raise
        self._count(reply.cost_usd, reply.usage.input_tokens, reply.usage.output_tokens)
        u = reply.usage
        self.log.event(
            "llm_call", purpose=request.purpose, tier=request.tier, model=reply.model,
            tokens_in=u.input_tokens, tokens_out=u.output_tokens,
            cache_read=u.cache_read_tokens, cache_write=u.cache_write_tokens,
            cost_usd=round(reply.cost_usd, 6), latency_s=round(reply.latency_s, 3),
            request_digest=request.digest(), new_messages=new_messages, reply=reply.to_dict())
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


def run(llm: Provider, meter: Meter, env: ToolEnv, tools: dict[str, Tool], *,
        system: list[str], instruction: str, tier: str) -> Ending:
    """Let the model work with its tools until it ends its turn or a limit stops it."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": instruction}]
    size = llm.count_tokens(instruction)
    if size > meter.budget.conversation_tokens:  # nothing to shorten: say so, call nothing
        return Ending("budget", f"the work's text alone is {size} tokens, over "
                      f"budget.conversation_tokens ({meter.budget.conversation_tokens}): "
                      "shorten it (attach long material as a file) or raise the budget")
    specs = [t.spec() for t in tools.values()]
    cache: dict[str, str] = {}
    repeats: Counter[tuple[str, str]] = Counter()  # (call, result) since the last change
    for _ in range(meter.budget.max_iterations):
        _bound(messages, meter, llm)
        request = Request(messages=list(messages), system=system, tools=specs, tier=tier,
                          max_tokens=meter.budget.max_output_tokens, purpose="execute")
        reply = _call(llm, meter, request, messages)
        if reply is None:
            continue
        if isinstance(reply, Ending):
            return reply
        blocks: list[dict[str, Any]] = []
        if reply.text:
            blocks.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            blocks.append({"type": "tool_use", "id": call.id, "name": call.name,
                           "input": dict(call.input)})
        messages.append({"role": "assistant", "content": blocks or reply.text or "(no reply)"})
        if not reply.tool_calls:
            return Ending("end_turn", text=reply.text)
        results = []
        for call in reply.tool_calls:
            key = call.name + json.dumps(call.input, sort_keys=True, default=str)
            output, error = _dispatch(call, tools, env, cache, key)
            ran = tools.get(call.name)
            if ran is not None and not ran.reads:
                # It may have changed state: nothing cached holds, and every other call's
                # repetition count starts again (its own keeps counting: a command that
                # keeps giving the same answer is still a loop).
                cache.clear()
                for seen in [k for k in repeats if k[0] != key]:
                    del repeats[seen]
            repeats[(key, output)] += 1
            results.append({"type": "tool_result", "tool_use_id": call.id, "content": output,
                            **({"is_error": True} if error else {})})
            if repeats[(key, output)] >= NO_PROGRESS_REPEATS:
                count = repeats[(key, output)]
                meter.log.event("breaker", tool=call.name, repeats=count)
                return Ending("no_progress", f"{call.name} was called {count} times with the "
                              "same arguments and got the same result, with nothing changed "
                              "in between")
        messages.append({"role": "user", "content": results})
        if env.task_outcome is not None:
            return Ending("task_finished", text=env.task_outcome[1])
    return Ending("iterations", f"reached the cap of {meter.budget.max_iterations} iterations")


def _call(llm: Provider, meter: Meter, request: Request,
          messages: list[dict[str, Any]]) -> Reply | Ending | None:
    """The model's next reply; an Ending when a limit or the provider stops the wake;
    None when its output was no valid action (it is shown the problem and tries again)."""
    try:
        return meter.call(llm, request)
    except BudgetExceeded as exc:
        return Ending("budget", str(exc))
    except DailyCapReached as exc:
        return Ending("daily_cap", str(exc))
    except StructuredOutputError as exc:
        # The model's output is an observation, not a crash: show it the problem.
        messages += [{"role": "assistant", "content": exc.raw[:2000] or "(empty)"},
                     {"role": "user", "content": f"That was not a valid action: "
                      f"{exc.problem}. Try again."}]
        return None
    except ProviderError as exc:
        return Ending("provider_error", str(exc))


def _bound(messages: list[dict[str, Any]], meter: Meter, llm: Provider) -> None:
    """Keep the conversation within its budget (the oldest tool results go first)."""
    budget = meter.budget.conversation_tokens
    dropped = prompt.bound_conversation(messages, budget, llm.count_tokens)
    if dropped:
        meter.log.event("conversation_bounded", dropped=dropped, budget=budget)


def _dispatch(call: ToolCall, tools: dict[str, Tool], env: ToolEnv, cache: dict[str, str],
              key: str) -> tuple[str, bool]:
    """Run one tool call (or answer it from the cache); returns (output, is_error)."""
    name, args, problem = call.name, dict(call.input), call.problem
    started = time.monotonic()
    error, cached = False, False
    tool = tools.get(name)
    if problem:
        output, error = f"error: {problem}", True
    elif tool is None:
        output, error = f"error: no tool '{name}' in this wake", True
    elif tool.cacheable and key in cache:
        output, cached = cache[key], True
    else:
        try:
            output = tool.run(env, args)  # bad arguments are a ToolFailure naming its parameters
        except (ToolFailure, SharedError) as exc:  # the commons refused: the model reads why
            output, error = f"error: {exc}", True
        except Exception as exc:  # a bug inside the tool: logged as its failure, ends the wake
            failed = env.secrets.redact(f"failed: {type(exc).__name__}: {exc}")
            _log(env, name, args, failed, error=True, cached=False, started=started)
            raise
        output = env.secrets.redact(output)  # whatever a tool read, a secret never goes on
        if tool.cacheable:
            cache[key] = output
    wrote = tool.writes if tool is not None and not error else None
    _log(env, name, args, output, error=error, cached=cached, started=started,
         **({"wrote": str(args[wrote])} if wrote and args.get(wrote) else {}))
    return output, error


def _log(env: ToolEnv, name: str, args: dict[str, Any], output: str, *, error: bool,
         cached: bool, started: float, **more: str) -> None:
    """The `tool_call` event (`wrote`: the file a writing tool wrote, see `Tool.writes`)."""
    if env.log is not None:
        env.log.event("tool_call", tool=name, args=args, result=output[:_SUMMARY],
                      result_chars=len(output), error=error, cached=cached,
                      duration_s=round(time.monotonic() - started, 3), **more)
