"""Per-citizen rate and concurrency, so one citizen's flood never starves another's.

Each citizen has a token bucket (its `budget.max_calls_per_minute`, refilled evenly)
and a count of calls in flight (`budget.max_concurrent_calls`). Past either, the call
is answered 429 with `retry-after` at once - it holds no thread, no upstream connection
and no money - and the SDK backs off. Other citizens' buckets are untouched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from citizen.broker.refused import Refused


class Allowance(Protocol):
    @property
    def calls_per_minute(self) -> int: ...
    @property
    def concurrent(self) -> int: ...


@dataclass
class _Bucket:
    tokens: float
    stamp: float
    inflight: int = 0


@dataclass
class Limiter:
    """The buckets of every citizen that called, under one lock."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    @contextmanager
    def hold(self, citizen: str, allowance: Allowance) -> Iterator[None]:
        """One call of `citizen` in flight for the block.

        :raises Refused: 429 - over its rate or its concurrency.
        """
        now = time.monotonic()
        rate = allowance.calls_per_minute / 60.0
        with self._lock:
            bucket = self._buckets.setdefault(
                citizen, _Bucket(float(allowance.calls_per_minute), now))
            bucket.tokens = min(float(allowance.calls_per_minute),
                                bucket.tokens + (now - bucket.stamp) * rate)
            bucket.stamp = now
            if bucket.inflight >= allowance.concurrent:
                raise Refused(429, "rate_limit_error",
                              f"{citizen} has {bucket.inflight} calls in flight, its most "
                              "(budget.max_concurrent_calls)", {"retry-after": "1"})
            if bucket.tokens < 1.0:
                wait = max(1, round((1.0 - bucket.tokens) / rate))
                raise Refused(429, "rate_limit_error",
                              f"{citizen} is over {allowance.calls_per_minute} calls a "
                              "minute (budget.max_calls_per_minute)",
                              {"retry-after": str(wait)})
            bucket.tokens -= 1.0
            bucket.inflight += 1
        try:
            yield
        finally:
            with self._lock:
                bucket.inflight -= 1

    def idle(self) -> bool:
        """No call in flight."""
        with self._lock:
            return all(b.inflight == 0 for b in self._buckets.values())
