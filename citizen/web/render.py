"""Jinja2 templates of the dashboard (autoescape on: whatever a citizen, a mail or a model
wrote is shown as text), rendered with the session's CSRF value for the page's forms; and
`facts`, the one way a route reads the stores: in a worker thread, never on the event
loop (one slow read would stop every route, approve included), within a deadline."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from urllib.parse import parse_qs

import anyio
import anyio.to_thread
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from citizen.errors import CitizenError
from citizen.web.auth import Session
from shared import clock

P = ParamSpec("P")
T = TypeVar("T")
# A page's files are read within this: every read of a citizen's file is bounded and
# non-blocking (shared/door.py), so only a machine under strain comes near it - and then
# the page says so instead of holding the browser (and a worker) for ever.
READ_S = 15.0

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

# Autoescape every template whatever its suffix: a page never contains markup it did not write.
ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(
    enabled_extensions=("html",), default_for_string=True, default=True))


def when(value: object) -> Markup:
    """An ISO time as a person reads it - "3 min ago" - with the exact time in its title
    (`{{ r.started|when }}`); nothing when there is none. Both are escaped: a time in a
    record is the record writer's text."""
    if value is None or value == "":
        return Markup("")
    iso = str(value)
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(iso, clock.age(iso))


ENV.filters["age"] = clock.age
ENV.filters["when"] = when


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """`template` rendered with `context`, the session's CSRF value and the request."""
    session: Session | None = request.scope.get("state", {}).get("session")
    html = ENV.get_template(template).render(
        request=request, csrf=session.csrf if session else "", path=request.url.path, **context)
    return HTMLResponse(html, status_code=status_code)


def fragment(template: str, **context: Any) -> str:
    """A part of a page (the live rows of an event), rendered alone."""
    return ENV.get_template(template).render(**context)


async def form(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (first value each); no multipart parser is needed."""
    fields = parse_qs((await request.body()).decode("utf-8", "replace"))
    return {k: v[0] for k, v in fields.items()}


class Late(CitizenError, TimeoutError):
    """A page's files were not read within their deadline."""


async def facts(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in a worker thread, given up after READ_S seconds.

    :raises Late: it did not return in time (the thread is abandoned: its result, if
        it ever comes, is dropped).
    """
    try:
        with anyio.fail_after(READ_S):
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs),
                                                  abandon_on_cancel=True)
    except TimeoutError:
        raise Late(f"reading {getattr(fn, '__name__', 'the page')} took over {READ_S:.0f} s - "
                   "a citizen's files may be planted to slow it; see `journalctl -u "
                   "citizen-web` and `citizen status`") from None


async def late(request: Request, exc: Exception) -> Response:
    """A page whose facts were `Late`: 503, saying why, never a hung request."""
    return page(request, "missing.html", status_code=503, heading="Too slow to read",
                what=str(exc))
