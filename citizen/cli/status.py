"""`citizen status`: every citizen at a glance. Reads files only; never imports a model SDK."""

from __future__ import annotations

import functools
import json
from typing import Any

import click

from citizen import civilization
from citizen.access import permit
from citizen.admin.status import citizen_status, statuses
from citizen.cli.options import json_option
from citizen.cli.terminal import WIDTH, age, clean, command, table, wide_option
from citizen.config import paths
from citizen.errors import CitizenError

MAX_NAMES = 8  # citizens named in the permits' line; the rest counted


@click.command()
@wide_option
@json_option
def status(wide: bool, as_json: bool) -> None:
    """Show each citizen: daemon state, last and next wake, tasks, wakes and $ today.

    Times are ages here ("3 min ago"), ISO in --json; --wide adds the disk column and the
    current task's text. Under the table, who holds the civilization's wake permits and
    who waits for one (the broker's `max_working_wakes`); --json has each citizen's as
    `wake_permit`. TASKS: queued, then held (h), failed (f) and cancelled (c) when
    there are any, e.g. "3 queued 1h 2f 1c".

    \b
    Examples:
      citizen status
      citizen status --wide
      citizen --root /tmp/civ status --json
    """
    # The table without --wide shows no disk: no home is walked for it. Each row within
    # a deadline: a citizen's planted file makes its row "unreadable", never this hang.
    rows = statuses(civilization.citizens(),
                    functools.partial(citizen_status, measure_disk=wide or as_json))
    permits = permit.listing()  # the broker's; None: none answers (or it refused us)
    for r in rows:
        r["wake_permit"] = _permit_of(r["citizen"], permits)
    servers = _servers(rows)  # several servers: each row's, and the others' citizens
    if as_json:
        far = [{"citizen": c, "server": srv, "daemon": f"on {srv}", "elsewhere": True}
               for c, srv in (servers or {}).get("elsewhere", [])]
        click.echo(json.dumps(rows + far, indent=2))
        return
    if not rows:
        click.echo(f"no citizens under {paths.civ_root()} - create them with "
                   f"`{command('init')}`")
        return
    headers = ["CITIZEN", "DAEMON", "LAST WAKE", "NEXT", "TASKS", "TODAY", "TASK"]
    if wide:
        headers.insert(-1, "DISK")
    cells = [_cells(r, wide) for r in rows]
    if servers:
        headers.insert(1, "SERVER")
        cells = [[c[0], r["server"], *c[1:]] for c, r in zip(cells, rows, strict=True)]
        cells += [[name, server, f"on {server}", *["-"] * (len(headers) - 3)]
                  for name, server in servers["elsewhere"]]
    table(headers, cells, wide=wide)
    if servers:
        click.echo(clean(servers["line"]))
    for r in rows:  # what needs the operator, a line each under the table
        for note in _notes(r):
            line = clean(f"{r['citizen']}: {note}")
            click.echo(line if wide or len(line) <= WIDTH else line[:WIDTH - 1] + "…")
    if permits and (permits["holders"] or permits["waiting"]):
        click.echo(clean(_permits_line(permits)))


def _servers(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """On one of several servers (civilization.json): each row's `server` set to this
    one's, and {"elsewhere": [(citizen, server)], "line": every server and when it was
    last heard from} - their rows are on their own servers (`citizen status` there).
    None on a server of its own; a database that cannot be read is said in the line."""
    from citizen.broker import database, membership  # noqa: PLC0415 - several servers only

    try:
        settings = database.settings()
    except CitizenError as exc:
        return {"elsewhere": [], "line": f"servers: {exc}"}
    if settings is None:
        return None
    for r in rows:
        r["server"] = settings.server
    try:
        roster = membership.roster(settings.dsn)
    except Exception as exc:  # noqa: BLE001 - psycopg's errors: the table still shows
        return {"elsewhere": [], "line": f"servers: the civilization's database cannot be "
                f"read ({str(exc).strip()[:120]}) - as root, with the database up"}
    here = {r["citizen"] for r in rows}
    elsewhere = [(c, s["server"]) for s in roster for c in s["citizens"]
                 if s["server"] != settings.server and c not in here]
    heard = ", ".join(f"{s['server']} ({len(s['citizens'])} citizens, heard "
                      f"{age(s['seen']) if s['seen'] else 'never'})" for s in roster)
    return {"elsewhere": elsewhere, "line": f"servers: {heard}"}


def _permit_of(name: str, permits: dict[str, Any] | None) -> dict[str, Any] | None:
    """Citizen `name`'s wake permit as the broker says: {"state": "held", "since"} or
    {"state": "waiting", "ahead"}; None when it has none (or no broker answers)."""
    for held in (permits or {}).get("holders", []):
        if held.get("citizen") == name:
            return {"state": "held", "since": held.get("since")}
    for waiting in (permits or {}).get("waiting", []):
        if waiting.get("citizen") == name:
            return {"state": "waiting", "ahead": waiting.get("ahead")}
    return None


def _permits_line(permits: dict[str, Any]) -> str:
    """`wake permits: 2 of 2 held (aria, mira); 3 waiting (opus, nova, zed)`."""
    def names(entries: list[dict[str, Any]]) -> str:
        shown = [str(e.get("citizen")) for e in entries[:MAX_NAMES]]
        return ", ".join(shown) + (f" and {len(entries) - MAX_NAMES} more"
                                   if len(entries) > MAX_NAMES else "")

    held, waiting = permits["holders"], permits["waiting"]
    return (f"wake permits: {len(held)} of {permits['limit']} held"
            + (f" ({names(held)})" if held else "")
            + (f"; {len(waiting)} waiting ({names(waiting)})" if waiting else ""))


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
             f"{'#' + str(last['wake']) + ' ' if last['wake'] else ''}{last['type']} "
             f"{last['status']} {age(last['started'] or None)}"
             if last else "none",
             age(r["next_wake"]), tasks, today,
             (f"{task['id']} {task['text']}" if wide else task["id"]) if task else "-"]
    if wide:
        cells.insert(-1, "-" if r["disk_mb"] is None else f"{r['disk_mb']:.1f} MB")
    return cells


def _notes(r: dict[str, Any]) -> list[str]:
    # What could not be read, each in full (a cell is cut to fit the table).
    notes = list(r.get("problems") or [])
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
