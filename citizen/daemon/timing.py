"""When the daemon wakes: the first wake's spread and the doorbell's hourly window - the
arithmetic of the schedule, apart from the process that keeps it."""

from __future__ import annotations

import hashlib
import re
from collections import deque

FIRST_WAKE_SPREAD_S = 60.0  # first wakes spread over this (or the interval, if shorter)
# The rings that ask a drawn reviewer to test (citizen.tools.code, citizen.home.reviewing):
# a crowd serves such a citizen before those rung to adopt (citizen.daemon.crowd).
REVIEW_RING = re.compile(r" announced change \S+$|^doorbell: you were drawn to review ")


def first_wake_s(name: str, interval_s: float) -> float:
    """When a daemon started without --first-wake wakes first: 1 s, plus a spread fixed
    by its name, so a thousand daemons started at once do not all wake at once (and keep
    apart afterwards: the interval keeps each one's phase)."""
    share = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") / 2**32
    return 1.0 + share * min(interval_s, FIRST_WAKE_SPREAD_S)


def doorbell_wait(rung: deque[float], now: float, window_s: float, cap: int) -> float | None:
    """None, and `now` counted in `rung`, when a doorbell wake fits in the window's `cap`
    (budget.max_doorbell_wakes_per_hour); else the seconds until the oldest leaves it."""
    while rung and now - rung[0] >= window_s:
        rung.popleft()
    if len(rung) < cap:
        rung.append(now)
        return None
    return window_s - (now - rung[0])
