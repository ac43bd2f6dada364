"""Scripted model behaviour for wake tests: the mechanics, never a model's judgement; and
the citizen's task queue and a wake's logged events, which those tests read back."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from citizen.config import CitizenConfig, ModelPrice, Secrets
from citizen.llm.base import FREE, Provider, Reply, Request, ToolCall, Usage
from citizen.llm.scripted import ScriptedProvider

if TYPE_CHECKING:
    from citizen.home.tasks import TaskQueue
    from citizen.tools.base import ToolEnv


def call(name: str, cost: float = 0.0, **args: Any) -> Reply:
    """A reply calling one tool."""
    return Reply(text="", model="scripted", provider="scripted", usage=Usage(100, 10),
                 cost_usd=cost, tool_calls=(ToolCall(f"c-{name}", name, args),))


def say(text: str) -> Reply:
    """A reply ending the turn with text."""
    return Reply(text=text, model="scripted", provider="scripted", usage=Usage(100, 10))


# A command prefix that runs the rest of the argv with Ctrl-C (SIGINT) as at a person's
# terminal. A shell starts a background job with SIGINT ignored, its children inherit
# that (a CI runner under `nohup cmd &` did), and no shell can undo it: a test that sends
# Ctrl-C would then wait forever. exec keeps the default disposition set here.
AT_A_TERMINAL = [sys.executable, "-c", "import os, signal, sys; "
                 "signal.signal(signal.SIGINT, signal.SIG_DFL); "
                 "os.execvp(sys.argv[1], sys.argv[1:])"]


def provides(provider: Provider) -> Callable[[CitizenConfig, Secrets], Provider]:
    """A run_wake `provider=` that hands back `provider`, bound now: a loop passes its own."""
    return lambda _cfg, _secrets: provider


def tool_env(name: str) -> ToolEnv:
    """The ToolEnv a tool of citizen `name` gets in a wake."""
    from citizen import config
    from citizen.config import paths
    from citizen.home.contexts import ContextStore
    from citizen.home.memory import Memory
    from citizen.home.tasks import TaskQueue
    from citizen.llm.base import estimate_tokens
    from citizen.tools.base import ToolEnv

    home = paths.home(name)
    cfg = config.load_citizen(name)
    return ToolEnv(home, cfg, config.load_secrets(name), TaskQueue(home.tasks),
                   Memory(home.memory),
                   ContextStore(home.contexts, cfg.context_limits, estimate_tokens).load_all())


def queue(name: str = "opus") -> TaskQueue:
    """The task queue of citizen `name`."""
    from citizen.config import paths
    from citizen.home.tasks import TaskQueue

    return TaskQueue(paths.home(name).tasks)


def events(result_path: Path, kind: str) -> list[dict[str, Any]]:
    """The events of kind `kind` in the wake log at `result_path`."""
    from citizen.home import wakelog

    return [e for e in wakelog.read(result_path) if e["event"] == kind]


class Actor(ScriptedProvider):
    """Answers routing and tool selection by rule, and the work from a script."""

    def __init__(self, *work: Reply, tier: str = "fast", price: ModelPrice = FREE,
                 verdict: str = "pass", deliverables: dict[str, object] | None = None) -> None:
        self.work = list(work)
        # What the task names beyond the files the rule finds (commands, a question).
        self.deliverables = deliverables or {"files": [], "commands": [], "answer": False}
        self.tier = tier
        self.verdict = verdict  # what the verifier of a "done" says
        super().__init__(default=self._answer, price=price)

    def _answer(self, request: Request) -> Reply:
        if request.purpose == "route":
            return say(json.dumps({"tier": self.tier}))
        if request.purpose == "task_deliverables":
            return say(json.dumps(self.deliverables))
        if request.purpose == "verify_task":
            return say(json.dumps({"verdict": self.verdict, "reason": f"scripted {self.verdict}"}))
        if request.purpose == "select_tools":
            offered = request.output_schema["properties"]["tools"]["items"]["enum"]  # type: ignore[index]
            scripted = {c.name for r in self.work for c in r.tool_calls}
            return say(json.dumps({"tools": [n for n in offered if n in scripted][:12]}))
        if not self.work:
            return say("nothing more to do")
        return self.work.pop(0)

    def purposes(self) -> list[str]:
        return [r.purpose for r in self.requests]
