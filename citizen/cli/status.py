"""`citizen status`: every citizen at a glance. Reads files only; never imports a model SDK."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import click

from citizen import civilization, config
from citizen.admin import disk
from citizen.cli.options import json_option
from citizen.cli.terminal import WIDTH, age, clean, command, table, wide_option
from citizen.config import paths
from citizen.errors import CitizenError
from citizen.home import retention, spend, wakelog
from citizen.home.tasks import TaskQueue
from shared.atomic import read_json
from shared.monitor import alive

RECENT_WAKES = 300  # more than a citizen wakes in a day
RECENT_S = 2 * 86400.0  # wall seconds: a log written since may hold a wake of today
STALE_S = 120  # a heartbeat older than this (4 beats missed) means the daemon is not running


def citizen_status(name: str) -> dict[str, Any]:
    """Daemon state, last and next wake, current task, wakes and dollars today."""
    home = paths.home(name)
    daemon, next_wake = "not running", None
    if home.heartbeat.exists():
        try:
            beat = read_json(home.heartbeat)
            age = datetime.now(UTC) - datetime.fromisoformat(beat["updated"])
            if beat["state"] == "stopped" or not alive(int(beat["pid"])):
                daemon = "not running"
            elif age.total_seconds() > STALE_S and beat["state"] != "waking":
                daemon = f"stale heartbeat ({int(age.total_seconds())} s old)"
            else:
                daemon = f"{beat['state']} (pid {beat['pid']})"
                next_wake = beat.get("next_wake_at")
        except (ValueError, KeyError, OSError) as exc:
            daemon = f"unreadable heartbeat ({exc})"
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
        "citizen": name, "daemon": daemon, "next_wake": next_wake,
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


@click.command()
@wide_option
@json_option
def status(wide: bool, as_json: bool) -> None:
    """Show each citizen: daemon state, last and next wake, tasks, wakes and $ today.

    Times are ages here ("3 min ago"), ISO in --json; --wide adds the disk column and the
    current task's text. TASKS: queued, then held (h), failed (f) and cancelled (c) when
    there are any, e.g. "3 queued 1h 2f 1c".

    \b
    Examples:
      citizen status
      citizen status --wide
      citizen --root /tmp/civ status --json
    """
    rows = [citizen_status(n) for n in civilization.citizens()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no citizens under {paths.civ_root()} - create them with "
                   f"`{command('init')}`")
        return
    headers = ["CITIZEN", "DAEMON", "LAST WAKE", "NEXT", "TASKS", "TODAY", "TASK"]
    if wide:
        headers.insert(-1, "DISK")
    table(headers, [_cells(r, wide) for r in rows], wide=wide)
    for r in rows:  # what needs the operator, a line each under the table
        for note in _notes(r):
            line = clean(f"{r['citizen']}: {note}")
            click.echo(line if wide or len(line) <= WIDTH else line[:WIDTH - 1] + "…")


def _cells(r: dict[str, Any], wide: bool) -> list[str]:
    last = r["last_wake"]
    t = r["tasks"]
    # Compact, to keep the row within WIDTH: "3 queued 1h 2f 1c" (legend in --help).
    tasks = f"{t['queue']} queued" + "".join(
        f" {t[k]}{k[0]}" for k in ("held", "failed", "cancelled") if t.get(k))
    usd = r["usd_today"]
    today = (f"{r['wakes_today']} wakes ${usd:.{2 if usd >= 1 or not usd else 4}f}"
             + (f" of ${r['usd_per_day_cap']:.2f}" if r["usd_per_day_cap"] else ""))
    task = r["current_task"]
    cells = [r["citizen"], r["daemon"],
             f"#{last['wake']} {last['type']} {last['status']} {age(last['started'] or None)}"
             if last else "none",
             age(r["next_wake"]), tasks, today,
             (f"{task['id']} {task['text']}" if wide else task["id"]) if task else "-"]
    if wide:
        cells.insert(-1, f"{r['disk_mb']:.1f} MB")
    return cells


def _notes(r: dict[str, Any]) -> list[str]:
    notes = []
    if r["daily_cap_reached"]:
        notes.append("DAILY CAP REACHED: only model-free wakes until 00:00 UTC")
    if (disk_text := _disk_text(r["disk_budget"])):
        notes.append(disk_text)
    return notes


def _disk_text(verdict: dict[str, Any] | None) -> str:
    if verdict is None:
        return ""
    used = "unmeasured" if verdict["used_mb"] is None else f"{verdict['used_mb']:.0f} MB"
    if verdict["state"] == "near":
        return f"disk near its budget ({used} of {verdict['budget_mb']} MB)"
    return (f"DISK BUDGET: {used} of {verdict['budget_mb']} MB"
            + (f", unit stopped {age(verdict['stopped_at'])} (`{command('disk check')}`)"
               if verdict["stopped_at"] else ""))
