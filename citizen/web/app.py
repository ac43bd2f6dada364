"""The dashboard's Starlette app: every page module's routes (`citizen.web.pages.PAGES`),
the package's static files, behind the limits (`citizen.web.limits.Limits`: the Host
header and the body's size, before anything else) and the guard
(`citizen.web.auth.Guard`: session, CSRF, security headers, redaction). A page whose
files took longer than their deadline to read (`citizen.web.render.facts`) is a 503."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import RedirectResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from citizen.web import render
from citizen.web.auth import Guard, Sessions, load_token
from citizen.web.limits import Limits, operator_hosts
from citizen.web.pages import PAGES


def make_app(root: Path | None = None) -> Starlette:
    """The app for the civilization at `root` (default `$CIV_ROOT`, else /home).

    :raises citizen.web.auth.TokenMissing: on a server, the token file is not readable.
    """
    if root is not None:
        os.environ["CIV_ROOT"] = str(root)  # every path derives from this one variable
    sessions = Sessions(load_token())
    routes: list[BaseRoute] = []
    for module in PAGES:
        routes.extend(importlib.import_module(module).routes)
    # Browsers ask for /favicon.ico on their own (the pages link /static/favicon.ico).
    routes.append(Route("/favicon.ico", lambda request: RedirectResponse(
        "/static/favicon.ico", status_code=301)))
    routes.append(Mount("/static", StaticFiles(directory=render.STATIC), name="static"))
    # Limits first: a request to a name we do not serve, or too big, reaches no other code.
    app = Starlette(routes=routes, middleware=[
        Middleware(Limits, hosts=operator_hosts()), Middleware(Guard, sessions=sessions)],
        exception_handlers={render.Late: render.late})
    app.state.sessions = sessions
    return app
