"""Self-directed work: a CODE, DEBUG or RESEARCH slot with no task may improve the
citizen's own code toward its own goals - at most the operator's number a day.

The number is `budget.max_self_directed_wakes_per_day` (default 1): the operator's
rule, so on a server only `/etc/experience/<name>.json` or the release's templates set
it (`EXPERIENCE_RULES_DIR`), never the citizen's own `config.json` or `~/code/templates`.
One count a day for the three kinds together, kept in `state.json` and taken when the
wake begins (past the daily-spend check: a wake the cap stopped uses none). The gate
opens only with somewhere to go - open goals in the citizen's goals context and a
`~/code` to improve; with none, or the day's number used, the slot is idle: no model
call, $0.00. The count is a citizen's manners, not a wall (it runs code it may
rewrite); the spend caps the broker enforces are the wall.
"""

from __future__ import annotations

from typing import Any

from citizen.home import state
from citizen.home.contexts import ContextStore
from citizen.wake.types.base import Gate, Setup
from shared import clock

MARK = "self_directed"  # {"day": "YYYY-MM-DD", "count": wakes begun that day}
# Why: goals are written by the citizen's model, as many and as long as it likes.
MAX_GOALS, GOAL_CHARS = 8, 300


def used_today(marks: dict[str, Any]) -> int:
    """Self-directed wakes begun today (a count from another day is zero: the rollover)."""
    mark = marks.get(MARK) or {}
    return int(mark.get("count", 0)) if mark.get("day") == clock.today().isoformat() else 0


def open_goals(setup: Setup) -> list[str]:
    """The citizen's goals not completed, from its goals context (no model, no tokens)."""
    store = ContextStore(setup.home.contexts, setup.config.context_limits, len)
    return [" ".join(str(e.get("text", "")).split())[:GOAL_CHARS]
            for e in store.load("goals").entries if e.get("status") != "completed"]


def gate(setup: Setup, kind: str) -> Gate:
    """Whether an empty queue's slot may run self-directed (reason logged either way)."""
    allowed = setup.config.budget.max_self_directed_wakes_per_day
    used = used_today(setup.marks)
    if used >= allowed:
        return Gate(False, f"task queue is empty; {used} of {allowed} self-directed wakes "
                           "a day used (the operator's budget.max_self_directed_wakes_per_day)")
    if not (setup.home.code / ".git").exists():
        return Gate(False, "task queue is empty; no ~/code repository to improve")
    goals = open_goals(setup)
    if not goals:
        return Gate(False, "task queue is empty and I hold no open goals to work toward")
    return Gate(True, f"self-directed {kind} wake {used + 1} of {allowed} today, toward "
                      f"{len(goals)} goals", {"self_directed": goals})


def begin(setup: Setup, kind: str, goals: list[str]) -> str:
    """Count the wake (persisted before any model call) and return its instruction."""
    state.mark(setup.home, MARK, {"day": clock.today().isoformat(),
                                  "count": used_today(setup.marks) + 1})
    named = "\n".join(f"- {g}" for g in goals[:MAX_GOALS])
    return setup.templates.wake_prompt(kind, task=setup.templates.prompt(
        "self_directed", goals=named, code=setup.home.code))
