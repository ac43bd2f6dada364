"""TASK wakes, and their task-driven variants CODE, DEBUG and RESEARCH (which, with no
task, may run self-directed within the operator's number a day: `self_directed`)."""

from __future__ import annotations

from typing import Any, ClassVar

from citizen.home import working
from citizen.home.tasks import Task
from citizen.mail.outbox import answer
from citizen.tools import evidence
from citizen.tools.base import ToolEnv
from citizen.wake.meter import Ending
from citizen.wake.types import self_directed
from citizen.wake.types.base import Ask, Gate, Setup, WakeType

# Task kinds with a wake type of their own that is not a tool loop: never taken here.
OWN_WAKE_KINDS = ("CONSENSUS", "DEBATE")
# A task the model keeps working on without finishing fails after this many wakes.
MAX_WAKES_PER_TASK = 5
_FAILING_ENDINGS = {
    "budget": "ran out of budget",
    "iterations": "hit the iteration cap",
    "no_progress": "made no progress (a loop)",
}


class TaskWake(WakeType):
    """Carry out the next queued task (or continue the active one)."""

    name = "TASK"
    prefer: ClassVar[tuple[str, ...]] = ()
    # Whether an empty queue's slot may work on the citizen's own code (self_directed).
    self_directed: ClassVar[bool] = False
    required_tools = ("task_complete", "task_stuck", "task_progress")

    def gate(self, setup: Setup) -> Gate:
        active = setup.tasks.ids("active")
        if active and setup.tasks.cancel_requested(active[0]):  # of any kind: file it
            return Gate(True, f"task {active[0]} was cancelled by the operator",
                        {"task_id": active[0]})
        task_id = setup.tasks.peek(self.prefer, exclude=OWN_WAKE_KINDS)
        if task_id is None:
            if self.self_directed:
                return self_directed.gate(setup, self.name)
            return Gate(False, "task queue is empty")
        return Gate(True, f"task {task_id} is waiting", {"task_id": task_id})

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        if "self_directed" in gate.data:
            return self_directed.begin(setup, self.name, gate.data["self_directed"])
        task = setup.tasks.claim(gate.data["task_id"])
        # What "done" will be checked against, fixed when the task is taken (read again
        # next time if the model could not be asked now).
        before = task.meta.get("deliverables")
        evidence.settle(task.meta, task.text,
                        env.verify.extract if env.verify is not None else None)
        if task.meta.get("deliverables") != before:
            setup.tasks.save(task)
        env.task = task
        # The system blocks are built after this: the working context they carry holds
        # what earlier wakes did on the task, so this wake picks up where they stopped.
        working.remember(env.contexts, task)
        return setup.templates.wake_prompt(self.name, task=task.text)

    def steps(self, setup: Setup, gate: Gate, env: ToolEnv, ask: Ask,
              instruction: str) -> str | Ending:
        if env.task is not None and setup.tasks.cancel_requested(env.task.id):
            return Ending("cancelled", "the operator cancelled the task")  # no model call
        return instruction

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        task = env.task
        if task is None:  # a self-directed wake: no task to file
            return f"self-directed {ending.status}: {(ending.text or ending.reason)[:200]}"
        if ending.status == "cancelled" and env.task_outcome is None:
            env.task_outcome = ("cancelled", ending.reason)
        if env.task_outcome is not None:
            status, result = env.task_outcome
            finish_task(setup, env, task,
                        status if status in ("done", "failed", "cancelled") else "stuck", result)
            return f"task {task.id} {status}: {result[:200]}"
        if ending.status == "daily_cap":  # not the task's fault: it waits for tomorrow
            setup.tasks.progress(task, f"paused by the daily budget: {ending.reason[:200]}")
            working.remember(env.contexts, task)
            return f"task {task.id} waits: {ending.reason[:160]}"
        if ending.status in _FAILING_ENDINGS or ending.status == "provider_error":
            why = _FAILING_ENDINGS.get(ending.status, "model provider failed")
            finish_task(setup, env, task, "failed", f"{why}: {ending.reason}")
            return f"task {task.id} failed: {why}"
        wakes = setup.tasks.wakes_since_retry(task)
        note = ending.text[:500] or ending.reason[:500] or "(the wake ended without a result)"
        task.history.append({"event": "wake", "wake": setup.number, "note": note,
                             **_what_this_wake_did(env)})
        if wakes + 1 >= MAX_WAKES_PER_TASK:
            finish_task(setup, env, task, "failed",
                         f"no result after {MAX_WAKES_PER_TASK} wakes; last note: {note}")
            return f"task {task.id} failed: no result after {MAX_WAKES_PER_TASK} wakes"
        setup.tasks.progress(task, f"wake {setup.number} ended ({ending.status}) without "
                             "finishing; continues next wake")
        working.remember(env.contexts, task)
        return f"task {task.id} continues"


_LAST_RESULTS = 3


def _what_this_wake_did(env: ToolEnv) -> dict[str, Any]:
    """From this wake's log: the files it wrote and its last tool results - what the next
    wake of the same task needs to carry on instead of starting over."""
    calls = evidence.tool_calls(env.log.path if env.log is not None else None)
    if not calls:
        return {}
    touched = evidence.written(calls)
    last = [f"{c.get('tool')}({_short(c.get('args'))}) -> {str(c.get('result', ''))[:300]}"
            for c in calls[-_LAST_RESULTS:]]
    return {"touched": touched, "last": last}


def _short(args: object) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else ""
    return text if len(text) <= 120 else text[:117] + "..."


def finish_task(setup: Setup, env: ToolEnv, task: Task, status: str, result: str) -> None:
    """File the active task and, for a mail task, reply to its sender."""
    setup.tasks.finish(task, status, result)
    working.clear(env.contexts)
    if task.source == "mail" and task.meta.get("message_id"):
        note = answer(setup.home, task)
        if env.log is not None:
            env.log.event("mail_reply", task=task.id, to=task.meta.get("from"), note=note)
    env.contexts["history"].add(f"Task {task.id} ({status}): {task.text[:200]} -> "
                                f"{result[:300]}")


class CodeWake(TaskWake):
    name = "CODE"
    self_directed = True
    prefer = ("CODE",)


class DebugWake(TaskWake):
    name = "DEBUG"
    self_directed = True
    prefer = ("DEBUG",)


class ResearchWake(TaskWake):
    name = "RESEARCH"
    self_directed = True
    prefer = ("RESEARCH",)
