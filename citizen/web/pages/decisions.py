"""The Decisions page: GET /decisions (what waits for a person - computed from the stores on
every render -, proposals by state, debates, ThoughtStream rooms, the mail quarantine),
GET /decisions/proposals/{pid} with the approve and reject form and its POST,
GET /decisions/debates/{did} with its moves live (GET .../events, server-sent events) and
GET /decisions/streams/{sid}. The facts are `citizen.web.facts.decisions`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from citizen import civilization as civ
from citizen.web import render
from citizen.web.auth import Sessions
from citizen.web.facts import decisions
from shared.errors import Invalid, NotAllowed, NotFound

OPERATOR = "web"  # who decided, as recorded: the session proved the operator's token
POLL_S = 0.5  # a debate's event log is read twice a second: a move shows within 2 s
PING_S = 15  # a comment line keeps proxies and the browser from closing an idle stream


def _overview() -> dict[str, Any]:
    return {"queue": decisions.waiting_for_a_person(), "quarantine": decisions.quarantine(),
            "proposals": decisions.proposals(), "debates": decisions.debates(),
            "rooms": decisions.rooms()}


async def overview(request: Request) -> Response:
    return render.page(request, "decisions.html", **await render.facts(_overview))


async def _proposal_id(request: Request) -> str | None:
    pid = str(request.path_params["pid"])
    # Only an id the store lists reaches a path.
    return pid if pid in await render.facts(decisions.proposal_ids) else None


async def _proposal_page(request: Request, pid: str, message: str = "", refused: bool = False,
                         status_code: int = 200) -> Response:
    shown = await render.facts(decisions.proposal, pid)
    whole = json.dumps(shown, indent=1, ensure_ascii=False, default=str)
    return render.page(request, "proposal.html", status_code=status_code, p=shown,
                       whole=whole, message=message, refused=refused)


async def proposal(request: Request) -> Response:
    pid = await _proposal_id(request)
    if pid is None:
        return render.page(request, "missing.html", status_code=404, what="no such proposal")
    done = request.query_params.get("recorded", "")
    message = f"Recorded: {done}." if done in ("approve", "reject") else ""
    return await _proposal_page(request, pid, message)


async def decide(request: Request) -> Response:
    """A person's approve or reject (the guard has checked the session and the CSRF value),
    recorded by the CLI's rules with the token this process loaded: the session proved the
    operator holds it. A refusal is shown on the page; nothing is recorded then."""
    pid = await _proposal_id(request)
    if pid is None:
        return render.page(request, "missing.html", status_code=404, what="no such proposal")
    fields = await render.form(request)
    choice = fields.get("decision", "")
    if choice not in ("approve", "reject"):
        return await _proposal_page(request, pid, "Choose approve or reject.", True, 400)
    sessions: Sessions = request.app.state.sessions
    try:
        await render.facts(decisions.record_human_decision, pid, choice == "approve",
                           fields.get("why", ""), OPERATOR, sessions.token)
    except (NotAllowed, Invalid) as exc:
        return await _proposal_page(request, pid, f"Refused: {exc}", True, 409)
    return RedirectResponse(f"/decisions/proposals/{pid}?recorded={choice}", status_code=303)


def _debate_ids() -> list[str]:
    return list(civ.debates().ids())


async def _debate_id(request: Request) -> str | None:
    did = str(request.path_params["did"])
    return did if did in await render.facts(_debate_ids) else None


def moves_of(detail: dict[str, Any]) -> list[dict[str, Any]]:
    """The debate's events as a reader follows them: each move, moderator line, steelman,
    commitment and falsifier, in order (what `citizen debate follow` prints)."""
    return [e for e in detail["events"] if e.get("type") != "debate_started"]


async def debate(request: Request) -> Response:
    did = await _debate_id(request)
    if did is None:
        return render.page(request, "missing.html", status_code=404, what="no such debate")
    detail = await render.facts(decisions.debate, did)
    return render.page(request, "debate.html", d=detail, moves=moves_of(detail))


async def debate_events(request: Request) -> Response:
    did = await _debate_id(request)
    if did is None:
        return Response("no such debate", status_code=404)

    async def stream() -> AsyncIterator[ServerSentEvent]:
        seen = -1
        store = await render.facts(civ.debates)
        while not await request.is_disconnected():
            # Its events alone (the page's moves), not the whole debate replayed each poll.
            try:
                events = await render.facts(store.events, did)
            except render.Late:
                return  # the browser reconnects
            if len(events) != seen:
                seen = len(events)
                yield ServerSentEvent(render.fragment(
                    "_moves.html", moves=moves_of({"events": events})), event="moves")
            await asyncio.sleep(POLL_S)

    return EventSourceResponse(stream(), ping=PING_S)


def _stream_ids() -> list[str]:
    return list(civ.streams().ids())


async def stream_page(request: Request) -> Response:
    sid = str(request.path_params["sid"])
    if sid not in await render.facts(_stream_ids):
        return render.page(request, "missing.html", status_code=404, what="no such stream")
    try:
        detail = await render.facts(decisions.stream, sid)
    except NotFound as exc:
        return render.page(request, "missing.html", status_code=404, what=str(exc))
    return render.page(request, "stream.html", s=detail)


routes = [
    Route("/decisions", overview, methods=["GET"]),
    Route("/decisions/proposals/{pid}", proposal, methods=["GET"]),
    Route("/decisions/proposals/{pid}", decide, methods=["POST"]),
    Route("/decisions/debates/{did}", debate, methods=["GET"]),
    Route("/decisions/debates/{did}/events", debate_events, methods=["GET"]),
    Route("/decisions/streams/{sid}", stream_page, methods=["GET"]),
]
