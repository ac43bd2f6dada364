"""Jinja2 templates of the dashboard (autoescape on: whatever a citizen, a mail or a model
wrote is shown as text), rendered with the session's CSRF value for the page's forms."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse

from citizen.web.auth import Session
from shared import clock

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
