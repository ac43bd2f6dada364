"""The Decisions page's facts: what waits for a person, proposals, debates, ThoughtStream
rooms and the mail quarantine - computed from the stores on every call (never cached: an
empty queue is a fact about the store, not a default), through the same readers as
`citizen proposal list|show`, `debate list|show`, `stream list|show` and `mail quarantine`.

Everything returned is data as citizens, mails and models wrote it: escaping is the page's.
A source this process cannot read is named in `unreadable`, never shown as empty.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from citizen import civilization, config
from citizen.admin import approvals, helper, presence
from citizen.broker import views
from shared.consensus import STATES, listing, render
from shared.debates import summary as debate_summary
from shared.errors import SharedError
from shared.streams import summary as stream_summary
from shared.streams.rooms import ROOM_DEFAULTS

SUBJECT_CHARS = 200  # a quarantined mail's Subject as shown: enough to tell what it was about
# Why each kind of item waits for a person, and the command that settles it.
WAITS = {"proposal": "a high-stakes or escalated proposal: approve or reject it "
                     "(`citizen proposal approve|reject`)",
         "onboarding": "a citizen asked for a new citizen: `citizen onboard --approve|--reject`"}


def waiting_for_a_person() -> dict[str, Any]:
    """The queue of what waits for the operator, read from the stores now.

    {"items": [{"kind", "id", "summary", "why", "since", ...}], "count": n,
     "unreadable": [{"source", "error"}]} - `count` is 0 only when every source was read
    and holds nothing waiting; a source that could not be read is in `unreadable`.
    """
    items: list[dict[str, Any]] = []
    unreadable: list[dict[str, str]] = []
    problems: list[tuple[str, str]] = []
    try:  # from the records: a view planted or moved in proposals/<state> steers nothing
        store = civilization.consensus(config.templates())
        for r in listing.waiting_for_human(store, problems):
            items.append({"kind": "proposal", "id": r["id"], "summary": r["goal"],
                          "why": r["why"] or WAITS["proposal"], "since": r["opened"],
                          "stakes": r["stakes"]})
        if store.weights.problem:  # the replay went on without it; the operator should know
            unreadable.append({"source": "value weights", "error": store.weights.problem})
    except (OSError, SharedError) as exc:
        unreadable.append({"source": "proposals", "error": str(exc)})
    # One broken proposal is named alone; the others stay in the queue.
    unreadable += [{"source": f"proposal {pid}", "error": why} for pid, why in problems]
    try:  # the broker's state (0700 on a server): citizen.broker.views
        for r in views.read("onboarding")["requests"]:
            items.append({"kind": "onboarding", "id": r["id"],
                          "summary": f"{r.get('name')}: {r.get('focus') or ''}",
                          "why": f"asked by {r.get('author')}: {r.get('why') or ''}",
                          "since": r.get("requested_at")})
    except views.Unreadable as exc:
        unreadable.append({"source": "onboarding requests", "error": str(exc)})
    return {"items": items, "count": len(items), "unreadable": unreadable}


def proposals() -> dict[str, list[dict[str, Any]]]:
    """Every proposal's row (`citizen proposal list`), grouped by state."""
    rows = listing.rows(civilization.consensus(config.templates()))
    return {state: [r for r in rows if r["state"] == state] for state in STATES}


def proposal_ids() -> set[str]:
    """The ids of every proposal with a request (a listing and a stat each, no load):
    from the records, not the views a citizen can plant."""
    store = civilization.consensus(config.templates())
    return {pid for pid in store.ids() if store.threads.exists(pid)}


def proposal(pid: str) -> dict[str, Any]:
    """Proposal `pid` whole: what `citizen proposal show --json` gives, plus its row
    (phase, owed_by, roles, stakes and reasons, flags, the human decision).

    :raises Invalid: no such proposal.
    """
    d = civilization.consensus(config.templates()).load(pid)
    return {**render(d), "row": listing.row(d), "roles": d.roles,
            "stakes_reasons": d.stakes_reasons, "flags": d.flags, "human": d.human,
            "awaits_person": d.phase == "human"}


def debates() -> list[dict[str, Any]]:
    """Every debate in figures (`citizen debate list`)."""
    store = civilization.debates()
    return [debate_summary.summary(store, store.load(did)) for did in store.ids()]


def debate(did: str) -> dict[str, Any]:
    """Debate `did`: stage, steelman table, commitments, falsifiers, crux and its moves
    (`citizen debate show`, and the events `debate follow` prints)."""
    return debate_summary.detail(civilization.debates(), did)


def streams() -> list[dict[str, Any]]:
    """Every ThoughtStream decision: room, who was granted, how (`citizen stream list`)."""
    store = civilization.streams()
    return [stream_summary.summary(store, sid) for sid in store.ids()]


def stream(sid: str) -> dict[str, Any]:
    """Stream `sid`: each participant's bid, who was granted, the answers
    (`citizen stream show`)."""
    return stream_summary.detail(civilization.streams(), sid)


def rooms() -> dict[str, list[dict[str, Any]]]:
    """The streams grouped by room, oldest first."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in streams():
        out.setdefault(str(row["room"]), []).append(row)
    return out


def room_names() -> list[str]:
    """Every room the page can show: those with a document, those a stream was opened
    in, and the rooms with their own defaults."""
    store = civilization.streams()
    opened_in = {str(store.info(sid)["room"]) for sid in store.ids()}  # headers only
    return sorted({*store.rooms.names(), *opened_in, *ROOM_DEFAULTS, "general"})


def room(name: str) -> dict[str, Any]:
    """Room `name` now: its temperature (cooled until now), whether a person is watching
    (`present`: None when nobody ever said), its governance, and its streams
    (`citizen stream room show`, and `stream list` for the room).

    :raises Invalid: not a room name.
    """
    store = civilization.streams()
    data = store.room(name)
    # The room's streams only: a header each to find them, their decisions for those alone
    # (the presence stream reads this every second while a page watches).
    mine = [sid for sid in store.ids() if store.info(sid)["room"] == name]
    return {"room": name, "temperature": round(float(data["temperature_now"]), 3),
            "present": data.get("present"), "updated": data.get("updated"),
            "preset": data.get("preset"), "changes": data.get("changes", {}),
            "streams": [stream_summary.summary(store, sid) for sid in mine]}


def quarantine() -> dict[str, Any]:
    """Every citizen's quarantined mail with its reason (`citizen mail quarantine`, the
    broker's record, the newest first shown): {"rows": [{citizen, ts, from, subject,
    reason, message_id}], "truncated", "unreadable"}; `subject` as `subject_line` makes
    it, None where the record holds none."""
    try:  # the broker's state (0700 on a server): citizen.broker.views
        found = views.read("quarantine")
    except views.Unreadable as exc:
        return {"rows": [], "truncated": False,
                "unreadable": [{"source": "the mail quarantine", "error": str(exc)}]}
    rows = [{**r, "subject": subject_line(r.get("subject"))} for r in found["rows"]]
    return {"rows": rows, "truncated": found["truncated"], "unreadable": []}


def subject_line(subject: object) -> str | None:
    """A stranger's Subject as one line of at most SUBJECT_CHARS characters (an ellipsis
    where it was cut), its control and format characters - a newline, an escape, a
    right-to-left override that would reorder what the operator reads - each a space;
    None for no subject. Still text a stranger wrote: the page escapes it."""
    if subject is None:
        return None
    line = "".join(" " if unicodedata.category(c)[0] == "C" else c for c in str(subject))
    return line if len(line) <= SUBJECT_CHARS else line[:SUBJECT_CHARS - 1] + "\u2026"


def record_human_decision(proposal_id: str, approve: bool, why: str, operator: str,
                          token: str) -> dict[str, Any]:
    """Record a person's approve or reject from the dashboard, by the rules of
    `citizen proposal approve|reject` (citizen.admin.approvals). On a server the web
    user cannot write the root-owned decision: root's helper does, for the web user
    only, with the token; in dev mode the same function the CLI calls runs here.

    Returns {"proposal", "phase", "note"}.
    :raises NotAllowed: a wrong or missing token, nothing to approve, already decided,
        a rejection without a reason, or the helper unreachable - nothing recorded.
    :raises Invalid: no such proposal.
    """
    if config.server_mode():
        return helper.ask_root({"action": "decide", "proposal": proposal_id, "approve": approve,
                                "why": why, "operator": operator, "token": token})
    approvals.check_token(token)
    d, note = approvals.decide(proposal_id, approve, why, approvals.clean_operator(operator))
    return {"ok": True, "proposal": d.id, "phase": d.phase, "note": note}


def record_presence(room: str, present: bool, token: str) -> object:
    """Record that a person has room `room`'s page open (or no longer), by the rules of
    `citizen stream room presence` (citizen.admin.presence): on a server through root's
    helper (the web user writes nothing), in dev mode here.

    :raises NotAllowed: a wrong token, or the helper unreachable - nothing recorded.
    :raises Invalid: not a room name.
    """
    if config.server_mode():
        return helper.ask_root({"action": "presence", "room": room, "present": present,
                                "token": token})
    approvals.check_token(token)
    return presence.mark(room, present)
