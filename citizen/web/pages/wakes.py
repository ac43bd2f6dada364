"""GET /wakes/{name} (a citizen's timeline), GET /wakes/{name}/{n} (one wake's transcript,
the same facts as `citizen logs NAME --wake N`), GET .../events (the live tail of a wake in
progress, server-sent events, as `citizen logs --follow`) and GET .../blocks/{key} (a
system block of its prompts, on demand)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from citizen import civilization as civ
from citizen.web import render
from citizen.web.facts import wakes

POLL_S = 0.5  # the log is stat'ed twice a second (read only when it grew): as `logs -f`
PING_S = 15  # a comment line keeps proxies and the browser from closing an idle stream


async def _citizen(request: Request) -> str | None:
    name = str(request.path_params["name"])
    # Only a citizen's name reaches a path.
    return name if name in await render.facts(civ.citizens) else None


async def timeline(request: Request) -> Response:
    name = await _citizen(request)
    if name is None:
        return render.page(request, "missing.html", status_code=404, what="no such citizen")
    q = request.query_params
    try:
        page_no = int(q.get("page", "1"))
    except ValueError:
        page_no = 1
    facts = await render.facts(wakes.timeline, name, q.get("type") or None,
                               q.get("status") or None, page_no)
    return render.page(request, "wakes.html", **facts)


async def wake(request: Request) -> Response:
    name = await _citizen(request)
    if name is None:
        return render.page(request, "missing.html", status_code=404, what="no such citizen")
    number = int(request.path_params["n"])
    try:
        facts = await render.facts(wakes.transcript_of, name, number)
    except wakes.NoSuchWake as exc:
        return render.page(request, "missing.html", status_code=404, what=str(exc))
    return render.page(request, "wake.html", number=number, **facts)


def _offset(request: Request) -> int | None:
    """Where the tail starts: the last event id the browser got (a reconnect goes on from
    there), else the page's `offset`; None when neither is a byte offset."""
    raw = request.headers.get("last-event-id") or request.query_params.get("offset", "0")
    return int(raw) if raw.isdigit() else None


async def events(request: Request) -> Response:
    """New events of the wake as `events` (their <li> rows, id: the offset after them),
    then `end` with the final summary line once the wake has ended, and the stream stops.
    It stops too when the browser goes."""
    name, number, offset = await _citizen(request), int(request.path_params["n"]), _offset(request)
    if name is None:
        return Response("no such citizen", status_code=404)
    if offset is None:
        return Response("offset is a byte offset (a whole number) - reload the wake's page",
                        status_code=400)
    try:
        path = await render.facts(wakes.log_path, name, number)
    except wakes.NoSuchWake as exc:
        return Response(str(exc), status_code=404)

    async def stream() -> AsyncIterator[ServerSentEvent]:
        at, first = offset, True
        while not await request.is_disconnected():
            try:
                new = await render.facts(wakes.tail, name, path, at, first)
            except render.Late:
                return  # the browser reconnects from the last event it got
            at, first = new["offset"], False
            if new["events"]:
                yield ServerSentEvent("".join(
                    render.fragment("_event.html", e=e, citizen=name, number=number)
                    for e in new["events"]), event="events", id=str(at))
            if new["ended"]:
                if new["summary"]:
                    yield ServerSentEvent(render.fragment(
                        "_wake_summary.html", summary=new["summary"]), event="end")
                return
            await asyncio.sleep(POLL_S)

    return EventSourceResponse(stream(), ping=PING_S)


async def block(request: Request) -> Response:
    name = await _citizen(request)
    if name is None:
        return render.page(request, "missing.html", status_code=404, what="no such citizen")
    number, key = int(request.path_params["n"]), str(request.path_params["key"])
    try:
        text = await render.facts(wakes.block, name, number, key)
    except wakes.NoSuchWake as exc:
        return render.page(request, "missing.html", status_code=404, what=str(exc))
    return render.page(request, "block.html", citizen=name, number=number, key=key, text=text)


routes = [
    Route("/wakes/{name}", timeline, methods=["GET"]),
    Route("/wakes/{name}/{n:int}", wake, methods=["GET"]),
    Route("/wakes/{name}/{n:int}/events", events, methods=["GET"]),
    Route("/wakes/{name}/{n:int}/blocks/{key}", block, methods=["GET"]),
]
