"""Every citizen's status, read from files only (never a model SDK): its daemon, last and next
wake, current task, wakes and dollars today against its cap, disk. `citizen status` prints it
and the web dashboard's civilization page shows it - the same facts from one function.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from citizen import config
from citizen.admin import disk
from citizen.config import paths
from citizen.errors import CitizenError
from citizen.home import retention, spend, wakelog
from citizen.home.tasks import TaskQueue
from shared.atomic import read_json
from shared.monitor import alive

RECENT_WAKES = 300  # more than a citizen wakes in a day
RECENT_S = 2 * 86400.0  # wall seconds: a log written since may hold a wake of today
STALE_S = 120  # a heartbeat older than this (4 beats missed) means the daemon is not running


@dataclass(frozen=True)
class Daemon:
    """What citizen NAME's heartbeat says of its daemon."""

    text: str  # "sleeping (pid 12)", "not running", "stale heartbeat (130 s old)", ...
    running: bool  # a live daemon whose heartbeat is fresh (or which is waking)
    next_wake: str | None


def daemon(home: paths.Home) -> Daemon:
    """Read citizen's heartbeat alone - what `task add` needs to say whether it runs."""
    if not home.heartbeat.exists():
        return Daemon("not running", False, None)
    try:
        beat = read_json(home.heartbeat)
        age = datetime.now(UTC) - datetime.fromisoformat(beat["updated"])
        if beat["state"] == "failed":  # the daemon's last words: why it could not start
            return Daemon(f"failed to start: {beat.get('error', '?')}", False, None)
        if beat["state"] == "stopped" or not alive(int(beat["pid"])):
            return Daemon("not running", False, None)
        if age.total_seconds() > STALE_S and beat["state"] != "waking":
            return Daemon(f"stale heartbeat ({int(age.total_seconds())} s old)", False, None)
        polled = ", doorbell polled" if beat.get("doorbell", "inotify") != "inotify" else ""
        return Daemon(f"{beat['state']} (pid {beat['pid']}{polled})", True,
                      beat.get("next_wake_at"))
    except (ValueError, KeyError, OSError) as exc:
        return Daemon(f"unreadable heartbeat ({exc})", False, None)


def citizen_status(name: str) -> dict[str, Any]:
    """Daemon state, last and next wake, current task, wakes and dollars today."""
    home = paths.home(name)
    beat = daemon(home)
    logs = wakelog.wake_logs(home)
    today = spend.today()
    # By when each wake started (world time: shared.clock), read only from the logs
    # written in the last two days (a stat each, not a read of hundreds of logs).
    recent = [p for p in logs[-RECENT_WAKES:] if time.time() - p.stat().st_mtime < RECENT_S]
    rows = [r for r in (wakelog.summary(p) for p in recent)
            if str(r["started"])[:10] == today.isoformat()]
    last = wakelog.summary(logs[-1]) if logs else None
    active = TaskQueue(home.tasks).active()
    usd_today = spend.spent(home, spend.today())  # every call, in wakes or not
    try:
        cap = config.load_citizen(name).budget.max_usd_per_day
    except CitizenError:
        cap = None
    return {
        "citizen": name, "daemon": beat.text, "next_wake": beat.next_wake,
        "last_wake": last and {k: last[k] for k in ("wake", "type", "status", "started")},
        "current_task": active and {"id": active.id, "text": active.text[:120]},
        "tasks": TaskQueue(home.tasks).counts(),
        "wakes_today": len(rows),
        "usd_today": round(usd_today, 6),
        "usd_per_day_cap": cap,
        "daily_cap_reached": cap is not None and usd_today >= cap,
        "disk_mb": round(retention.disk_bytes(home) / 2**20, 1),  # logs are bounded (issue 18)
        "disk_budget": _disk(name),
    }


def _disk(name: str) -> dict[str, Any] | None:
    """Root's last disk check of this citizen (citizen.admin.disk), when it is past or near
    its budget or was stopped for it."""
    verdict = disk.last(name)
    if verdict is None or (verdict.state == "ok" and not verdict.stopped_at):
        return None
    return {"state": verdict.state, "used_mb": verdict.used_mb,
            "budget_mb": verdict.budget_mb, "checked_at": verdict.checked_at,
            "stopped_at": verdict.stopped_at}
