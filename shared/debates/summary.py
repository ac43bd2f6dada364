"""A debate for a reader (`citizen debate list|show`, the dashboard's Decisions page):
its figures, and its stage, steelman table, commitments, falsifiers and crux."""

from __future__ import annotations

from typing import Any

from shared import clock
from shared.debates.rules import Debate
from shared.debates.store import Debates


def summary(debates: Debates, d: Debate) -> dict[str, Any]:
    """One debate in figures: stage, moves, model calls, tokens, cost and time."""
    moves = debates.moves(d.id)
    thread = debates.thread(d.id)
    cost = [m.get("cost", {}) for m in moves]
    crux = debates.result(d.id)
    opened = clock.epoch(thread["ts"])  # any format: records before clock.now() were floats
    last = max((clock.epoch(m.get("ts")) for m in moves), default=opened)
    return {"id": d.id, "topic": d.topic, "participants": d.participants, "stage": d.stage,
            "owed_by": d.owed_by(), "moves": d.seq, "question": d.question,
            "calls": sum(int(c.get("calls", 0)) for c in cost),
            "tokens": sum(int(c.get("tokens", 0)) for c in cost),
            "cost_usd": round(sum(float(c.get("usd", 0)) for c in cost), 6),
            "seconds": round(last - opened, 1),
            "validated": crux.get("validated") if crux else None, "ended": d.ended,
            "opened": clock.now(opened) if opened else None}


def detail(debates: Debates, did: str) -> dict[str, Any]:
    """Debate `did` whole: its figures, steelmans, commitments, falsifiers (with the
    evidence each has), the crux (the validated one, else as it stands) and its moves."""
    d = debates.load(did)
    return {**summary(debates, d), "steelmans": d.steelmans, "commitments": d.commitments,
            "falsifiers": d.falsifiers,
            "evidence": {fid: len(ev) for fid, ev in d.evidence_on.items()},
            "crux": debates.result(did) or d.crux(), "events": debates.events(did)}
