"""Proposals as rows and views for a reader (`citizen proposal list|show`, the dashboard's
Decisions page): the same facts for both, computed from the store on every call."""

from __future__ import annotations

from typing import Any

from shared import clock
from shared.consensus.rules import Proposal
from shared.consensus.store import Consensus
from shared.consensus.view import render


def row(d: Proposal) -> dict[str, Any]:
    """Proposal `d` in one row: where it stands, who owes the next step, its goal."""
    return {"id": d.id, "state": d.state, "phase": d.phase, "owed_by": d.owed_by,
            "stakes": d.stakes, "round": d.round, "flags": len(d.flags),
            "goal": render(d)["goal"] or d.request.get("task", "")[:60],
            "why": d.why, "opened": opened(d)}


def rows(commons: Consensus, *, pending: bool = False, human: bool = False,
         problems: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Every proposal (only those in progress with `pending`, only those waiting for a
    human decision with `human`), by id - derived from the records, never from the views
    a citizen can plant or move. One that cannot be read is named in `problems` (id, why)."""
    out = []
    for d in commons.derived(problems):
        if (pending or human) and d.state != "pending":
            continue
        if human and d.phase != "human":
            continue
        out.append(row(d))
    return sorted(out, key=lambda r: str(r["id"]))


def waiting_for_human(commons: Consensus, problems: list[tuple[str, str]] | None = None
                      ) -> list[dict[str, Any]]:
    """The proposals a person must approve or reject before they go on (`problems`: as
    for `rows`)."""
    return rows(commons, human=True, problems=problems)


def opened(d: Proposal) -> str | None:
    """When proposal `d` was asked for, ISO (None for a request without a time)."""
    ts = d.request.get("ts")
    try:
        return clock.now(clock.epoch(ts)) if ts else None
    except ValueError:  # a record's time that is no timestamp: shown as none
        return None
