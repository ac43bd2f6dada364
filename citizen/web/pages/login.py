"""GET /login (the form) and POST /login (the operator's token in, a session cookie out)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from citizen.web import render
from citizen.web.auth import Sessions, cookie_header


async def login_form(request: Request) -> Response:
    return render.page(request, "login.html", refused=False)


async def login(request: Request) -> Response:
    sessions: Sessions = request.app.state.sessions
    offered = (await render.form(request)).get("token", "")
    if not sessions.token_ok(offered):
        return render.page(request, "login.html", status_code=401, refused=True)
    _, value = sessions.new()
    response = RedirectResponse("/", status_code=303)
    response.headers.append("set-cookie", cookie_header(value, request.url.scheme == "https"))
    return response


async def logout(request: Request) -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.headers.append("set-cookie", cookie_header("", request.url.scheme == "https", 0))
    return response


routes = [
    Route("/login", login_form, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
