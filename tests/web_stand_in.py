"""A TEST FIXTURE, not the dashboard: a tiny Starlette app with the dashboard's shape (an
escaped page under a strict Content-Security-Policy, its script served as a static file,
a server-sent event stream fed from a file under the civilization root) so the browser
harness (tests/browser.py) is proven before citizen/web/app.py:make_app exists.
tests/test_web_browser.py switches to the real app in one line.

Routes: `/` the page (its ?note= shown escaped), `/app.js` its script, `/events` a value
written to <root>/live.txt sent as an event, `/broken` a page whose script is missing (a
console error), `/unsafe` the note NOT escaped and no CSP (an alert the harness must see).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from markupsafe import escape
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

CSP = "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none'"
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>stand-in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<script src="{script}" defer></script></head>
<body><h1>Civilization (stand-in)</h1>
<p id="note">{note}</p>
<p>live: <span id="live">waiting</span></p></body></html>
"""
SCRIPT = """"use strict";
const live = document.getElementById("live");
const stream = new EventSource("/events");
stream.addEventListener("live", (event) => { live.textContent = event.data; });
"""


def make_app(root: Path) -> Starlette:
    live = root / "live.txt"

    async def page(request: Request) -> Response:
        note = request.query_params.get("note", "")
        return HTMLResponse(PAGE.format(script="/app.js", note=escape(note)),
                            headers={"Content-Security-Policy": CSP})

    async def broken(request: Request) -> Response:
        return HTMLResponse(PAGE.format(script="/missing.js", note=""),
                            headers={"Content-Security-Policy": CSP})

    async def unsafe(request: Request) -> Response:
        return HTMLResponse(PAGE.format(script="/app.js",
                                        note=request.query_params.get("note", "")))

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)  # a missing icon is a console error too

    async def script(request: Request) -> Response:
        return Response(SCRIPT, media_type="text/javascript")

    async def events(request: Request) -> Response:
        async def changes() -> AsyncIterator[dict[str, str]]:
            sent = None
            while True:  # the store is polled here, as the dashboard's facts are read
                value = live.read_text(encoding="utf-8") if live.exists() else None
                if value is not None and value != sent:
                    sent = value
                    yield {"event": "live", "data": value}
                await asyncio.sleep(0.05)
        return EventSourceResponse(changes())

    return Starlette(routes=[Route("/", page), Route("/broken", broken),
                             Route("/unsafe", unsafe), Route("/app.js", script),
                             Route("/events", events),
                             Route("/favicon.ico", favicon)])
