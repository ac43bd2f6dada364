"""A ThoughtStream room's page: GET /decisions/rooms/{room} (its temperature, whether a
person watches, its governance and its streams) and GET /decisions/rooms/{room}/presence,
the event stream the page holds open while it is visible - its presence (seed §8.5,
`citizen.web.presence`) - carrying the room's facts as they change."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from citizen.web import render
from citizen.web.auth import Sessions
from citizen.web.facts import decisions
from citizen.web.presence import Watchers

POLL_S = 1.0  # the room's facts are read once a second while someone watches
PING_S = 15  # a comment line keeps proxies and the browser from closing a quiet stream


async def _room(request: Request) -> str | None:
    name = str(request.path_params["room"])
    # Only a known room's name.
    return name if name in await render.facts(decisions.room_names) else None


def _watchers(request: Request) -> Watchers:
    state = request.app.state
    if not hasattr(state, "watchers"):  # one per app: what this process has recorded
        sessions: Sessions = state.sessions
        state.watchers = Watchers(functools.partial(decisions.record_presence,
                                                    token=sessions.token))
    watchers: Watchers = state.watchers
    return watchers


async def room(request: Request) -> Response:
    name = await _room(request)
    if name is None:
        return render.page(request, "missing.html", status_code=404, what="no such room")
    facts = await render.facts(decisions.room, name)
    return render.page(request, "room.html", r=facts)


async def watch(request: Request) -> Response:
    name = await _room(request)
    if name is None:
        return Response("no such room", status_code=404)
    watchers = _watchers(request)

    async def stream() -> AsyncIterator[ServerSentEvent]:
        await watchers.join(name)
        try:
            shown = ""
            while not await request.is_disconnected():
                try:
                    facts = await render.facts(decisions.room, name)
                except render.Late:
                    return  # the browser reconnects (and joins again)
                html = render.fragment("_room.html", r=facts)
                if html != shown:
                    shown = html
                    yield ServerSentEvent(html, event="room")
                await asyncio.sleep(POLL_S)
        finally:
            # Shielded: the stream ends by cancellation, and the person's leaving must
            # still be recorded.
            with anyio.CancelScope(shield=True):
                await watchers.leave(name)

    return EventSourceResponse(stream(), ping=PING_S)


routes = [
    Route("/decisions/rooms/{room}", room, methods=["GET"]),
    Route("/decisions/rooms/{room}/presence", watch, methods=["GET"]),
]
