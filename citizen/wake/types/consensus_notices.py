"""What a CONSENSUS wake mails the people who asked for a proposal: a notice when it
waits for a human decision, and one when it is decided (each once per state)."""

from __future__ import annotations

import json
from typing import Any

from citizen.home import state
from citizen.mail.outbox import notice
from citizen.tools.base import ToolEnv
from citizen.wake.types.base import Setup
from shared.consensus import Consensus, Proposal, render

MAILED = "consensus_mailed"  # mark: proposal id -> the phase its requester was told about


def _dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)


def notices_due(commons: Consensus, me: str, mailed: dict[str, str]) -> list[Proposal]:
    """Proposals I requested from mail whose requester has not heard of their state."""
    due = []
    for data in commons.views():
        pid, source = str(data.get("id")), data.get("source") or {}
        if mailed.get(pid) == "done" or data.get("proposer") != me or not source.get("from"):
            continue
        if data.get("phase") in ("human", "done") and mailed.get(pid) != data.get("phase"):
            due.append(commons.load(pid))
    return due


def send_notices(setup: Setup, env: ToolEnv, commons: Consensus, me: str) -> None:
    mailed = dict(setup.marks.get(MAILED, {}))
    due = notices_due(commons, me, mailed)
    if not due:
        return
    for d in due:
        src = d.request.get("source", {})
        if d.phase == "human":
            subject = f"[consensus] approval needed: {d.id}"
            body = (f"Proposal {d.id} ({d.stakes} stakes) needs a human decision: {d.why}.\n\n"
                    f"Goal: {render(d)['goal']}\nActions:\n{_dump(render(d)['actions'])}\n\n"
                    f"Reply with 'approve {d.id}' or 'reject {d.id} <why>' as the first line,"
                    f" or run `citizen proposal approve {d.id}` on the server.\n")
        else:
            subject = f"[consensus] {d.result}: {d.id}"
            body = (f"Proposal {d.id} was {d.result}: {d.why}.\n\n"
                    f"{_dump(render(d)['consensus'])}\n")
        note = notice(setup.home, str(src["from"]), subject, body,
                      in_reply_to=str(src.get("message_id", "")))
        env.event("consensus_notice", proposal=d.id, phase=d.phase, to=src.get("from"),
                  note=note)
        mailed[d.id] = d.phase
    state.mark(setup.home, MAILED, mailed)
