"""A stream for a reader (`citizen stream list|show`, the dashboard's Decisions page):
its room, who bid and how, who was granted, the answers."""

from __future__ import annotations

from typing import Any

from shared import clock
from shared.streams.store import Streams


def summary(streams: Streams, sid: str) -> dict[str, Any]:
    """Stream `sid` in one row: room, text, participants, the decision, who answered."""
    info, decision = streams.info(sid), streams.decision(sid) or {}
    return {"id": sid, "room": info["room"], "text": info["text"][:80],
            "participants": info["participants"], "granted": decision.get("granted"),
            "exit": decision.get("exit"), "decided_at_ms": decision.get("decided_at_ms"),
            "fallback": bool(decision.get("fallback")),
            "responses": sorted(streams.responses(sid)),
            "created": when(info.get("created", info.get("ts")))}


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
