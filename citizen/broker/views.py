"""The dashboard's read-only views of what only the broker can read.

The broker's state directory is its user's alone (0700 on a server): the ledger's refused
reservations, the mail quarantine and the onboarding requests live there (the wake
permits in its memory), and the dashboard's user (`experience-web`) cannot open them.
The broker answers it on its socket instead - `GET /v1/experience/views/refused?days=N`,
`.../quarantine`, `.../onboarding`, `.../permits` - for root, the dashboard's user and,
in dev mode, its own user, each known by the kernel (`SO_PEERCRED`), never by a header.
Every other uid, a citizen's above all, gets 403 and nothing else: a citizen must not
read another's quarantine or the ledger's rows of the others. Answers are bounded
(`MAX_ROWS`, `MAX_DAYS`).

One computation: each view is one function over the broker's state. The broker runs it
for a caller on a server; in dev mode, where the state is the developer's own, `read`
runs the same function in the reader's process.
"""

from __future__ import annotations

import os
import pwd
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs

from citizen import config
from citizen.access import client, permit
from citizen.admin import helper
from citizen.broker import mailstate, onboarding, spend
from citizen.broker.ledger import LedgerUnavailable
from citizen.broker.refused import Refused
from citizen.broker.server import VIEWS, Broker
from citizen.config import paths
from citizen.errors import CitizenError, ProviderUnavailable
from shared import clock
from shared.atomic import CorruptFile

PREFIX = "/v1/experience/views/"
DAYS = 30  # the Money page's window, today included
MAX_DAYS = 366  # days asked for past this are capped: a year is the most a page shows
MAX_ROWS = 2000  # rows of one answer (the newest); `truncated` says more were left off
NO_BROKER = "the broker does not answer (systemctl status experience-broker)"
_STATE_ERRORS = (OSError, sqlite3.Error, CorruptFile, LedgerUnavailable)
_REQUEST_KEYS = ("id", "name", "focus", "strengths", "why", "author", "requested_at")


class Unreadable(CitizenError):
    """A view could not be had; the message says why and where to look."""


def may_view(uid: int, *, server_mode: bool) -> None:
    """:raises Refused: 403, unless `uid` is root, the dashboard's user or (dev mode only)
    the broker's own user."""
    if uid == 0:  # root: the operator, who reads this state with `sudo citizen` anyway
        return
    if not server_mode and uid == os.geteuid():  # dev mode: one user runs everything
        return
    try:
        # The name is the release's constant (root-owned code), never a caller's word.
        web_uid: int | None = pwd.getpwnam(helper.WEB_USER).pw_uid
    except KeyError:
        web_uid = None  # no dashboard user on this machine: nobody else may look
    if uid != web_uid:
        # The refusal says nothing of the state: a citizen learns only that it may not.
        raise Refused(403, "permission_error", "the broker's views are root's and the "
                      f"dashboard's ({helper.WEB_USER}) only")


# ---------------------------------------------------------------- the views

def refused(days: int = DAYS) -> dict[str, Any]:
    """The calls refused because their worst case did not fit a cap, per UTC day and
    citizen over the last `days` (1 to MAX_DAYS, today included):
    {"series": [{day, citizen, refused, usd}], "truncated": bool}.

    :raises sqlite3.Error: the ledger cannot be read.
    """
    days = min(max(days, 1), MAX_DAYS)
    since = (clock.today() - timedelta(days=days - 1)).isoformat()
    series, truncated = spend.refused_per_day(paths.broker_state(), since, MAX_ROWS)
    return {"series": series, "truncated": truncated}


def quarantine() -> dict[str, Any]:
    """Every citizen's quarantined mail with its reason (`citizen mail quarantine`), the
    newest MAX_ROWS: {"rows": [{citizen, ts, from, reason, message_id}], "truncated"}.

    :raises sqlite3.Error: the mail state cannot be read.
    """
    rows, truncated = mailstate.quarantined_readonly(paths.broker_state(), MAX_ROWS)
    return {"rows": rows, "truncated": truncated}


def onboarding_requests() -> dict[str, Any]:
    """The requests for a new citizen that wait for the operator (`citizen onboard
    --list`), oldest first: {"requests": [{id, name, focus, strengths, why, author,
    requested_at}], "truncated"}.

    :raises CorruptFile: a request file does not parse.
    """
    waiting = [{k: r.get(k) for k in _REQUEST_KEYS} for r in onboarding.all_requests()
               if r.get("status") in onboarding.OPEN]
    return {"requests": waiting[:MAX_ROWS], "truncated": len(waiting) > MAX_ROWS}


# name -> (the function, the whole-number parameters it takes)
_VIEWS: dict[str, tuple[Callable[..., dict[str, Any]], tuple[str, ...]]] = {
    "refused": (refused, ("days",)),
    "quarantine": (quarantine, ()),
    "onboarding": (onboarding_requests, ())}


# ---------------------------------------------------------------- in the broker

def params(query: str, allowed: tuple[str, ...]) -> dict[str, int]:
    """A view's whole-number parameters (every view of the broker reads its query here).

    :raises Refused: 400 for a parameter the view does not take or not a number."""
    try:
        fields = parse_qs(query, max_num_fields=8)  # bounded: a query is a few numbers
    except ValueError as exc:
        raise Refused(400, "invalid_request_error", f"a bad query: {exc}") from exc
    out: dict[str, int] = {}
    for key, values in fields.items():
        if key not in allowed:
            raise Refused(400, "invalid_request_error",
                          f"this view takes {', '.join(allowed) or 'no parameter'}")
        try:
            out[key] = int(values[-1][:12])
        except ValueError:
            raise Refused(400, "invalid_request_error", f"{key} is a whole number") from None
    return out


def _served(name: str) -> Callable[[Broker, int, str], tuple[int, Any]]:
    compute, allowed = _VIEWS[name]

    def view(broker: Broker, uid: int, query: str) -> tuple[int, Any]:
        may_view(uid, server_mode=broker.server_mode)  # first: a refused caller gets no more
        asked = params(query, allowed)
        try:
            return 200, compute(**asked)
        except _STATE_ERRORS as exc:
            raise Refused(500, "api_error", f"the broker cannot read its {name}: {exc}") \
                from exc

    return view


for _name in _VIEWS:
    VIEWS[PREFIX + _name] = _served(_name)


def _permits(broker: Broker, uid: int, query: str) -> tuple[int, Any]:
    """Who holds a wake permit and who waits (citizen.broker.permits): the broker's
    memory, so asked of it in dev mode too (`citizen.access.permit.listing`)."""
    may_view(uid, server_mode=broker.server_mode)
    params(query, ())
    return 200, broker.permits.view()


VIEWS[permit.VIEW] = _permits


# ---------------------------------------------------------------- the reader's side

def read(name: str, **params: int) -> dict[str, Any]:
    """View `name` for the dashboard. On a server it is asked of the broker (the state is
    its user's alone); in dev mode the same function runs here, on the developer's files.

    :raises Unreadable: the broker does not answer or refused, or the state cannot be
        read - never an empty view in place of one that could not be had.
    """
    compute, _ = _VIEWS[name]
    if not config.server_mode():
        try:
            return compute(**params)
        except _STATE_ERRORS as exc:
            raise Unreadable(f"{paths.broker_state()}: {exc}") from exc
    try:
        status, answer = client.view(PREFIX + name, params)
    except ProviderUnavailable as exc:
        raise Unreadable(NO_BROKER) from exc
    if status != 200 or not isinstance(answer, dict):
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise Unreadable(f"the broker refused ({status}): {message or 'no reason given'}")
    return answer
