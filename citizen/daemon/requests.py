"""A citizen's wake requests, and the order its daemon serves them in.

Rung work first: a ring (a task, a change to review or adopt, mail, a STREAM for held
mail) is someone waiting on this citizen now, while a scheduled slot's wake is upkeep
that keeps its phase whenever it runs. Served in arrival order, a slot queued a moment
before a ring held the ring for a whole wake, every interval: with a short interval
there is always a slot waiting, and a reviewer's test waited behind REFLECT, then
LIBRARY (the demo measured it). Slots cannot starve: the rings that jump them are
bounded by the doorbell's hourly window (budget.max_doorbell_wakes_per_hour), and a
slot's request is coalesced, so at most one waits.
"""

from __future__ import annotations

import queue
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class WakeRequest:
    wake_type: str | None  # None: the next scheduled slot
    reason: str


WAKE_UP = WakeRequest("", "signal")  # put by the signal handler; not a wake


class Requests(queue.Queue[WakeRequest]):
    """queue.Queue (its lock, blocking get, task accounting) with two lines inside: every
    rung request, in arrival order, before any scheduled slot's."""

    def _init(self, maxsize: int) -> None:
        self.rung: deque[WakeRequest] = deque()
        self.slots: deque[WakeRequest] = deque()

    def _qsize(self) -> int:
        return len(self.rung) + len(self.slots)

    def _put(self, item: WakeRequest) -> None:
        (self.slots if item.wake_type is None else self.rung).append(item)

    def _get(self) -> WakeRequest:
        return (self.rung or self.slots).popleft()

    def waiting(self) -> list[WakeRequest]:
        """What waits, in the order it will be served (for status and tests)."""
        with self.mutex:
            return [*self.rung, *self.slots]
