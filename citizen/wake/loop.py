"""The tool-use loop of a wake. Every model call goes through the wake's meter
(`citizen.wake.meter`), which enforces the dollar caps before a call; the loop enforces
the iteration cap.

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
from typing import Any

from citizen.errors import ProviderError, StructuredOutputError
from citizen.home.spend import DailyCapReached
from citizen.llm.base import Provider, Reply, Request, ToolCall
from citizen.tools.base import Tool, ToolEnv, ToolFailure
from citizen.wake import prompt
from citizen.wake.meter import BudgetExceeded, Ending, Meter
from shared.errors import SharedError

NO_PROGRESS_REPEATS = 3
_SUMMARY = 300


def run(llm: Provider, meter: Meter, env: ToolEnv, tools: dict[str, Tool], *,
        system: list[str], instruction: str, tier: str, stable: int | None = None,
        cache_ttl: str = "5m", shared: int = 0) -> Ending:
    """Let the model work with its tools until it ends its turn or a limit stops it
    (`stable`, `cache_ttl`, `shared`: how the provider may cache the system, see
    `Request`)."""
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
                          max_tokens=meter.budget.max_output_tokens, purpose="execute",
                          stable=stable, cache_ttl=cache_ttl, shared=shared)
        reply = _call(llm, meter, request, messages, env)
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


def _call(llm: Provider, meter: Meter, request: Request, messages: list[dict[str, Any]],
          env: ToolEnv) -> Reply | Ending | None:
    """The model's next reply; an Ending when a limit or the provider stops the wake, or
    the operator cancelled its task; None when its output was no valid action (it is
    shown the problem and tries again)."""
    # The operator may cancel the task while the wake works on it (`citizen task cancel`):
    # honoured between turns - never mid-tool, so no step is left half done - and the
    # wake ends "cancelled", what it did so far in its log.
    if env.task is not None and env.tasks.cancel_requested(env.task.id):
        meter.log.event("task", id=env.task.id, transition="cancel_requested")
        return Ending("cancelled", "the operator cancelled the task (citizen task cancel)")
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


def perform(tool: Tool, env: ToolEnv, args: dict[str, Any]) -> tuple[str, bool]:
    """A tool call the wake makes itself (no model asked for it: a REVIEW wake's test run,
    its filed report), run and logged exactly as the model's are; (output, is_error)."""
    return _dispatch(ToolCall(f"wake-{tool.name}", tool.name, args), {tool.name: tool}, env,
                     {}, "")


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
