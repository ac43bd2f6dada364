"""GET / (every citizen now) and GET /events (its rows again whenever a heartbeat or a wake
log changes, as server-sent events). Read off the event loop within a deadline
(`render.facts`), each row by itself (`facts.civilization.rows`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from citizen import civilization as civ
from citizen.admin.status import statuses
from citizen.config import paths
from citizen.home import wakelog
from citizen.web import render
from citizen.web.facts import civilization

POLL_S = 1.0  # a stat of each heartbeat and wake-log directory, once a second
PING_S = 15  # a comment line keeps proxies and the browser from closing an idle stream


async def home(request: Request) -> Response:
    return render.page(request, "civilization.html", rows=await render.facts(civilization.rows),
                       permits=await render.facts(civilization.permits))


def signature(name: str) -> tuple[object, ...]:
    """What changes when citizen NAME's row would: its heartbeat's and wake-log directory's
    mtime, and the size of its newest log. Stats only: cheap enough to poll."""
    home_ = paths.home(name)
    out: list[object] = []
    for path in (home_.heartbeat, home_.wake_logs):
        try:
            out.append(os.lstat(path).st_mtime_ns)  # lstat: a stat of a FIFO never blocks
        except OSError:
            out.append(None)
    logs = wakelog.wake_logs(home_)
    try:
        out.append(os.lstat(logs[-1]).st_size if logs else None)
    except OSError:  # swept since it was listed
        out.append(None)
    return tuple(out)


def changed_rows(seen: dict[str, tuple[object, ...]],
                 rows: dict[str, dict[str, object]]) -> bool:
    """Bring `rows` up to date, recomputing only the citizens whose signature moved since
    `seen` (both updated in place); whether anything changed."""
    names = civ.citizens()
    changed = set(rows) - set(names)
    for gone in changed:
        rows.pop(gone)
        seen.pop(gone, None)
    moved = []
    for name in names:
        now = signature(name)
        if seen.get(name) != now:
            seen[name] = now
            moved.append(name)
    for r in statuses(moved, civilization.row, civilization.ROWS_S):  # each by itself
        rows[r["citizen"]] = r if r["unreadable"] is None else civilization.unreadable_row(
            r["citizen"], r["unreadable"])
        changed.add(r["citizen"])
    return bool(changed)


async def events(request: Request) -> Response:
    async def stream() -> AsyncIterator[ServerSentEvent]:
        seen: dict[str, tuple[object, ...]] = {}
        rows: dict[str, dict[str, object]] = {}
        while not await request.is_disconnected():
            try:
                moved = await render.facts(changed_rows, seen, rows)
            except render.Late:
                return  # the browser reconnects, and reads every row afresh
            if moved:
                yield ServerSentEvent(render.fragment("_rows.html", rows=[
                    rows[name] for name in sorted(rows)]), event="rows")
            await asyncio.sleep(POLL_S)

    return EventSourceResponse(stream(), ping=PING_S)


routes = [Route("/", home, methods=["GET"]), Route("/events", events, methods=["GET"])]
