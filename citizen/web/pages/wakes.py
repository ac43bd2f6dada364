"""GET /wakes/{name} (a citizen's timeline) and GET /wakes/{name}/{n} (one wake's transcript,
the same facts as `citizen logs NAME --wake N`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from citizen import civilization as civ
from citizen.web import render
from citizen.web.facts import wakes


def _citizen(request: Request) -> str | None:
    name = str(request.path_params["name"])
    return name if name in civ.citizens() else None  # only a citizen's name reaches a path


async def timeline(request: Request) -> Response:
    name = _citizen(request)
    if name is None:
        return render.page(request, "missing.html", status_code=404, what="no such citizen")
    q = request.query_params
    try:
        page_no = int(q.get("page", "1"))
    except ValueError:
        page_no = 1
    facts = wakes.timeline(name, q.get("type") or None, q.get("status") or None, page_no)
    return render.page(request, "wakes.html", **facts)


async def wake(request: Request) -> Response:
    name = _citizen(request)
    if name is None:
        return render.page(request, "missing.html", status_code=404, what="no such citizen")
    try:
        facts = wakes.transcript_of(name, int(request.path_params["n"]))
    except wakes.NoSuchWake as exc:
        return render.page(request, "missing.html", status_code=404, what=str(exc))
    return render.page(request, "wake.html", **facts)


routes = [
    Route("/wakes/{name}", timeline, methods=["GET"]),
    Route("/wakes/{name}/{n:int}", wake, methods=["GET"]),
]
