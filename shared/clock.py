"""World time, and the one timestamp format of the commons (ISO 8601 UTC, ms, `Z`).

World time is what records, ledgers, memory days and schedules read. It is the wall
clock, except under `EXPERIENCE_CLOCK=START,ANCHOR,SPEED` (set by `bench/month.py`; no
install sets it): then world time is START + (wall - ANCHOR) × SPEED, so a month of
days passes in an hour and every process of the civilization agrees on the date.
Liveness (heartbeats, locks, timeouts) stays on the wall clock: a process is not
more alive because the simulation runs fast.

Records used to carry three formats (`…Z`, `+00:00`, epoch floats); `epoch` reads any
of them, so records written before the change still order and compare correctly.
"""

from __future__ import annotations

import os
import time as _wall
from datetime import UTC, date, datetime
from functools import lru_cache

CLOCK_ENV = "EXPERIENCE_CLOCK"


@lru_cache(maxsize=4)
def _parse(value: str) -> tuple[float, float, float]:
    try:
        start, anchor, speed = (float(part) for part in value.split(","))
    except ValueError:
        raise ValueError(f"{CLOCK_ENV}={value!r} is not START,ANCHOR,SPEED (three numbers: "
                         f"world and wall epoch seconds, and how fast world time runs) - "
                         f"unset it to run on the wall clock") from None
    if not speed > 0:
        raise ValueError(f"{CLOCK_ENV}: SPEED must be above 0, not {speed}")
    return start, anchor, speed


def _world() -> tuple[float, float, float]:
    value = os.environ.get(CLOCK_ENV, "")
    return _parse(value) if value else (0.0, 0.0, 1.0)


def time() -> float:
    """World time in seconds since the epoch (the wall clock unless simulated)."""
    start, anchor, speed = _world()
    wall = _wall.time()
    return wall if speed == 1.0 and start == anchor else start + (wall - anchor) * speed


def speed() -> float:
    """World seconds per wall second (1.0 unless simulated)."""
    return _world()[2]


def wall_seconds(world_s: float) -> float:
    """How long `world_s` of world time lasts on the wall clock (for schedulers)."""
    return world_s / speed()


def today() -> date:
    """The world's UTC date."""
    return datetime.fromtimestamp(time(), tz=UTC).date()


def moment() -> datetime:
    """World time as an aware UTC datetime."""
    return datetime.fromtimestamp(time(), tz=UTC)


def now(at: float | None = None) -> str:
    """`2026-11-23T03:25:00.123Z` for `at` (seconds since the epoch; default: world now)."""
    t = time() if at is None else at
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


def age(when: str | datetime | None, now: datetime | None = None) -> str:
    """`when` (ISO 8601 or a datetime) as a person reads it: "12 s ago", "3 min ago",
    "in 5 min", "2 h ago", "4 d ago"; "-" when there is none, the text itself if unparsable.
    Measured against the wall clock unless `now` is given (what the CLI and the dashboard
    show a person, who lives on the wall clock)."""
    if when is None or when == "":
        return "-"
    try:
        moment_ = when if isinstance(when, datetime) else datetime.fromisoformat(str(when))
    except ValueError:
        return str(when)
    if moment_.tzinfo is None:
        moment_ = moment_.replace(tzinfo=UTC)
    seconds = ((now or datetime.now(UTC)) - moment_).total_seconds()
    span = abs(seconds)
    if span < 60:
        text = f"{int(span)} s"
    elif span < 3600:
        text = f"{int(span // 60)} min"
    elif span < 2 * 86400:
        text = f"{int(span // 3600)} h"
    else:
        text = f"{int(span // 86400)} d"
    return f"{text} ago" if seconds >= 0 else f"in {text}"
