"""The seed's "hard cap 50 API calls per task; escalate if exceeded" (L695) for a
consensus task, pure: each step's record carries the model calls its wake made for it
(`CALLS`, beside its cost), a chained step's request carries what the steps before it
made, and a task past the cap stops before its next step and waits for a person.

Why counted in the records: a consensus task is worked by three citizens over many
wakes, so no one wake's meter sees it whole (a queued TASK's calls are counted in the
task itself, `budget.max_calls_per_task`). The counts are the participants' own, like
every step they write - a soft limit like the daemon's; the broker's daily and
per-citizen caps are the hard ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

MAX_CALLS_PER_TASK = 50  # the seed's (L695), as for a queued task's wakes
CALLS = "calls"  # in a step's record: the model calls its wake made for that step


def step_calls(data: Mapping[str, Any] | None) -> float:
    """A step's own calls as recorded (a finite number ≥ 0, a share when one call served
    several proposals; anything else - JSON's NaN and Infinity included - counts as 0)."""
    value = (data or {}).get(CALLS)
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        return 0.0
    return round(float(value), 4)


def before(request: Mapping[str, Any]) -> float:
    """The calls the task's earlier steps made (a chained proposal's request says)."""
    chain = request.get("chain")
    return step_calls(chain) if isinstance(chain, Mapping) else 0.0


def total(request: Mapping[str, Any], steps: Iterable[Mapping[str, Any] | None]) -> float:
    """The task's calls so far: its earlier steps' and these records'."""
    return round(before(request) + sum(step_calls(s) for s in steps), 4)


def over(used: float) -> str:
    """Why a person must decide, once `used` calls reach the cap ("" below it)."""
    if used < MAX_CALLS_PER_TASK:
        return ""
    return (f"the task has made {used:.0f} model calls, the seed's cap of "
            f"{MAX_CALLS_PER_TASK} a task")
