"""The civilization page's rows: per citizen what `citizen status` says, plus the wake in
progress (or what a wake with work waits for), the heartbeat's age, the monitor's findings,
and the day's dollars against the cap with the burn rate (what the day ends at if the last
hour goes on); above them, who holds the wake permits and who waits. Read as `citizen status`
reads its rows (`citizen.admin.status.statuses`): one citizen's broken or planted files
make its own row "unreadable", never the page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from citizen import civilization
from citizen.access import permit
from citizen.admin.status import Unreadable, citizen_status, read_heartbeat, statuses
from citizen.admin.status import unreadable_row as status_unreadable
from citizen.config import paths
from citizen.home import spend
from shared import clock

if TYPE_CHECKING:
    from shared.monitor import Monitor

AMBER = spend.WARN_SHARE  # past this share of its daily cap a citizen's money shows amber
FINDINGS_S = 86400.0  # the monitor's reports of the last day
# Under the page's own deadline (citizen.web.render.READ_S, 15 s): a row that hangs is
# that row's "unreadable", not the whole page's 503.
ROWS_S = 10.0


def rows() -> list[dict[str, Any]]:
    """One row per citizen, read from the stores now (the monitor's reports through one
    handle of the commons: building it lists the citizens)."""
    monitor = civilization.commons().monitor
    return [r if r["unreadable"] is None else unreadable_row(r["citizen"], r["unreadable"])
            for r in statuses(civilization.citizens(), lambda name: row(name, monitor),
                              ROWS_S)]


def permits() -> dict[str, Any] | None:
    """Who holds the civilization's wake permits and who waits for one, in order (the
    broker's `max_working_wakes`): {"limit", "holders", "waiting"}; None when no broker
    answers (dev mode with none running: nobody waits)."""
    return permit.listing()


def unreadable_row(name: str, why: str) -> dict[str, Any]:
    """A row whose citizen's files could not be read: `why`, no figures."""
    return {**status_unreadable(name, why), "heartbeat_age_s": None, "current_wake": None,
            "findings": [], "usd_last_hour": 0.0, "usd_projected": 0.0, "level": "ok",
            "projected_level": "ok", "cap_share": None}


def row(name: str, monitor: Monitor | None = None) -> dict[str, Any]:
    """One citizen's row (see the module)."""
    status = citizen_status(name, measure_disk=False)  # the page shows no disk
    home = paths.home(name)
    last = status["last_wake"]  # the wake being written now, if its log has no end yet
    running = last and last["status"] == "running" and {
        k: last[k] for k in ("wake", "type", "started")}
    # The burn rate reads the ledger's lines: only when status found it readable.
    readable = not any(p.startswith("spend ledger") for p in status["problems"])
    return {**status, "heartbeat_age_s": _beat_age(home), "current_wake": running or None,
            "findings": findings(name, monitor), **money(
                home, status["usd_today"], status["usd_per_day_cap"], readable=readable)}


def _beat_age(home: paths.Home) -> float | None:
    try:
        beat = read_heartbeat(home)  # a forged or planted one has no age worth showing
        return None if beat is None else round(clock.time() - clock.epoch(beat["updated"]), 1)
    except (Unreadable, ValueError, KeyError, TypeError):
        return None


def findings(name: str, monitor: Monitor | None = None) -> list[dict[str, Any]]:
    """The monitor's findings about `name` filed in the last day, newest first."""
    cutoff = clock.time() - FINDINGS_S
    out: list[dict[str, Any]] = []
    for report in (monitor or civilization.commons().monitor).about(name):
        if clock.epoch(report.get("ts")) < cutoff:
            continue
        out.extend({"ts": report.get("ts"), "kind": f.get("kind"), "detail": f.get("detail")}
                   for f in report.get("findings") or [] if isinstance(f, dict))
    return sorted(out, key=lambda f: str(f["ts"]), reverse=True)


def money(home: paths.Home, usd_today: float, cap: float | None,
          now: datetime | None = None, *, readable: bool = True) -> dict[str, Any]:
    """The day's spend against its cap: the last hour's spend, where the day ends if that
    rate goes on until midnight UTC, and the level ("ok", "amber" past 80 %, "over")."""
    now = now or datetime.fromtimestamp(clock.time(), UTC)
    hour_ago = now - timedelta(hours=1)
    last_hour = 0.0
    for line in spend.lines(home, now.date()) if readable else ():
        try:
            if datetime.fromisoformat(str(line.get("ts"))) >= hour_ago:
                last_hour += max(float(line.get("cost_usd", 0.0)), 0.0)
        except (TypeError, ValueError):
            continue  # a line that does not parse counts as nothing (as spend.spent)
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
    projected = usd_today + last_hour * (midnight - now).total_seconds() / 3600
    return {"usd_last_hour": round(last_hour, 6), "usd_projected": round(projected, 6),
            "level": level(usd_today, cap), "projected_level": level(projected, cap),
            "cap_share": round(usd_today / cap, 4) if cap else None}


def level(usd: float, cap: float | None) -> str:
    """"over" at or past the cap, "amber" past 80 % of it, else "ok"."""
    if not cap:
        return "ok"
    if usd >= cap:
        return "over"
    return "amber" if usd > AMBER * cap else "ok"
