"""A stream for a reader (`citizen stream list|show`, the dashboard's Decisions page):
its room, who bid and how, who was granted, the answers."""

from __future__ import annotations

from typing import Any

from shared import clock
from shared.streams.store import Streams

# A stream's state for its reader. UNDECIDED and UNANSWERED want the operator's eye
# (`citizen stream list --open`, `citizen stream reopen`): no decision yet (its bidders'
# waits ended - a pause, a kill), or a person's message nobody has answered yet.
UNDECIDED, PAUSED, UNANSWERED, ANSWERED, SILENT = (
    "undecided", "paused", "unanswered", "answered", "silent")
OPEN = (UNDECIDED, PAUSED, UNANSWERED)


def summary(streams: Streams, sid: str) -> dict[str, Any]:
    """Stream `sid` in one row: room, text, participants, the decision, who answered,
    and its state (`state`)."""
    info, decision = streams.info(sid), streams.decision(sid) or {}
    responses = sorted(streams.responses(sid))
    return {"id": sid, "room": info["room"], "text": info["text"][:80],
            "participants": info["participants"], "granted": decision.get("granted"),
            "exit": decision.get("exit"), "decided_at_ms": decision.get("decided_at_ms"),
            "fallback": bool(decision.get("fallback")), "responses": responses,
            "state": state(streams, info, bool(decision), responses),
            "created": when(info.get("created", info.get("ts")))}


def state(streams: Streams, info: dict[str, Any], decided: bool, responses: list[str]
          ) -> str:
    """UNDECIDED (PAUSED: its room is), ANSWERED (someone spoke), UNANSWERED (decided,
    a person's message, nobody spoke yet) or SILENT (a citizen's message nobody had to
    answer)."""
    if not decided:
        return PAUSED if streams.settings(str(info["room"])).paused else UNDECIDED
    if responses:
        return ANSWERED
    return UNANSWERED if info.get("human") else SILENT


def detail(streams: Streams, sid: str) -> dict[str, Any]:
    """Stream `sid` whole: its row, every participant's bid record, the answers."""
    return {**summary(streams, sid),
            "records": {c: streams.read_record(sid, c)
                        for c in streams.info(sid)["participants"]},
            "answers": {c: r["text"] for c, r in streams.responses(sid).items()}}


def when(ts: object) -> str | None:
    """A record's time as ISO (records before the one format carry an epoch float)."""
    try:
        return clock.now(clock.epoch(ts)) if ts else None  # type: ignore[arg-type]
    except (TypeError, ValueError):  # no timestamp: shown as none
        return None
