"""The one timestamp format of the commons: ISO 8601 UTC with milliseconds and a `Z`.

Records used to carry three formats (`…Z`, `+00:00`, epoch floats); `epoch` reads any
of them, so records written before the change still order and compare correctly.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now(at: float | None = None) -> str:
    """`2026-11-23T03:25:00.123Z` for `at` (seconds since the epoch; default: now)."""
    t = time.time() if at is None else at
    stamp = datetime.fromtimestamp(t, tz=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def epoch(ts: str | float | int | None) -> float:
    """Seconds since the epoch for any timestamp a record may carry (0.0 when absent).

    :raises ValueError: a string that is no ISO 8601 timestamp.
    """
    if ts is None or ts == "":
        return 0.0
    if isinstance(ts, (int, float)):
        return float(ts)
    text = ts.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
