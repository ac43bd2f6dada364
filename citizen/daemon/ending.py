"""How a wake process ended, read from the log it leaves: a line for the journal, and for
a process that died before its last event, that event written for it."""

from __future__ import annotations

import logging

from citizen.config.paths import Home
from citizen.home import wakelog
from citizen.home.tasks import now_iso
from shared.atomic import append_line

log = logging.getLogger(__name__)


def record(home: Home, number: int, code: int, duration: float) -> bool:
    """Log how wake `number` ended; True when it crashed (died, or our code raised)."""
    logs = sorted(home.wake_logs.glob(f"{number:06d}-*.jsonl"))
    events = wakelog.read(logs[0]) if logs else []
    end = next((e for e in reversed(events) if e.get("event") == "wake_end"), None)
    if end is None:
        how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if logs:
            append_line(logs[0], {"ts": now_iso(), "wake": number, "event": "wake_end",
                                  "status": "crashed", "reason": how,
                                  "duration_s": round(duration, 3)})
        log.error("wake %d: the wake process %s without finishing its log", number, how)
        return True
    log.info("wake %d %s: %s in %.1f s ($%.4f, %s calls)%s", number,
             logs[0].stem.split("-", 1)[1], end.get("status"), duration,
             end.get("cost_usd", 0.0), end.get("calls", 0),
             f" - {end['reason']}" if end.get("reason") else "")
    return any(e.get("event") == "error" for e in events)
