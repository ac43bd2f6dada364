"""GET / (every citizen now) and GET /events (its rows again whenever a heartbeat or a wake
log changes, as server-sent events)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from citizen import civilization as civ
from citizen.config import paths
from citizen.home import wakelog
from citizen.web import render
from citizen.web.facts import civilization

POLL_S = 1.0  # a stat of each heartbeat and wake-log directory, once a second
PING_S = 15  # a comment line keeps proxies and the browser from closing an idle stream


async def home(request: Request) -> Response:
    return render.page(request, "civilization.html", rows=civilization.rows())


def signature() -> tuple[object, ...]:
    """What changes when a row would: each heartbeat's and wake-log directory's mtime, and
    the size of the newest log. Stats only: cheap enough to poll."""
    out: list[object] = []
    for name in civ.citizens():
        home_ = paths.home(name)
        for path in (home_.heartbeat, home_.wake_logs):
            try:
                out.append(path.stat().st_mtime_ns)
            except OSError:
                out.append(None)
        logs = wakelog.wake_logs(home_) if home_.wake_logs.is_dir() else []
        out.append(logs[-1].stat().st_size if logs else None)
    return tuple(out)


async def events(request: Request) -> Response:
    async def stream() -> AsyncIterator[ServerSentEvent]:
        seen: tuple[object, ...] | None = None
        while not await request.is_disconnected():
            now = await asyncio.to_thread(signature)
            if now != seen:
                seen = now
                rows = await asyncio.to_thread(civilization.rows)
                yield ServerSentEvent(render.fragment("_rows.html", rows=rows), event="rows")
            await asyncio.sleep(POLL_S)

    return EventSourceResponse(stream(), ping=PING_S)


routes = [Route("/", home, methods=["GET"]), Route("/events", events, methods=["GET"])]
