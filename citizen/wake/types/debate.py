"""DEBATE wakes: make the moves this citizen owes in structured debates.

The gate is deterministic (the replayed threads and the task queue): nothing owed
means an idle wake and no model call. Each move is one schema-validated call; a move
the rules refuse is retried once with the reason, then the turn passes (PASS), so a
debate never waits on a participant that cannot move. After each move the next
participant's doorbell rings: a debate runs at conversation speed.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from citizen import civilization
from citizen.home import state
from citizen.mail.outbox import notice
from citizen.tools.base import ToolEnv
from citizen.wake.types.base import Ask, Setup
from citizen.wake.types.owed import OwedStepsWake, Spec
from citizen.wake.types.stream import volunteers
from shared.debates import (
    GRADES,
    SIDES,
    Debate,
    Debates,
    IllegalMove,
    scaled_budgets,
)
from shared.errors import SharedError

log = logging.getLogger(__name__)

MAX_MOVES = 8  # moves one wake may make (several debates can wait at once)
MAX_FAILURES = 3  # failed wakes on one turn before the turn passes
PEERS = 2  # a mailed debate: the citizen it reached and two peers
FAILURES = "debate_failures"
MAILED = "debates_mailed"


class DebateWake(OwedStepsWake[Debate]):
    name = "DEBATE"
    # Up to 8 moves a wake; a turn ("did:seq") that failed three times passes.
    spec = Spec(max_steps=8, max_failures=3, failures_mark="debate_failures",
                event="debate_move",
                idle="no debate move is owed by me and no debate task waits",
                notices="cruxes to mail")

    def store(self, setup: Setup) -> Debates:
        return _debates(setup)

    def take(self, setup: Setup, env: ToolEnv, ask: Ask, item: Debate) -> Debate:
        return _one_move(setup, ask, _debates(setup), item, setup.home.name)

    def failure_key(self, item: Debate) -> str:
        return f"{item.id}:{item.seq}"

    def fallback(self, setup: Setup, item: Debate, why: str) -> Debate:
        """The turn passes: a debate never waits on a participant that cannot move."""
        return _debates(setup).move(item.id, setup.home.name,
                                    {"move": "PASS", "content": f"no move: {why[:200]}"})

    def step_data(self, item: Debate, after: Debate) -> dict[str, Any]:
        move = next((str(m["move"]) for m in reversed(after.messages)
                     if m["author"] != "moderator"), "")
        return {"debate": item.id, "move": move, "stage": after.stage,
                "next": after.owed_by(), "summary": f"{move} ({after.stage})"}

    def rings(self, setup: Setup, after: Debate) -> list[tuple[str, str]]:
        out = [(after.owed_by(), f"move in {after.id}")] if after.owed_by() else []
        if not after.active:  # the starter mails the crux to whoever asked for it
            starter = str(_debates(setup).thread(after.id).get("started_by", ""))
            out.append((starter, f"{after.id} ended"))
        return out

    def from_task(self, setup: Setup, env: ToolEnv) -> str:
        return _start_from_task(_debates(setup), setup, env)

    def owed_text(self, owed: list[Debate]) -> str:
        return f"my move in {', '.join(d.id for d in owed)}"

    def notices_due(self, setup: Setup) -> int:
        return len(_notices_due(_debates(setup), setup.home.name,
                                setup.marks.get(MAILED, [])))

    def send_notices(self, setup: Setup, env: ToolEnv) -> None:
        _send_notices(setup, env, _debates(setup), setup.home.name)


def _debates(setup: Setup) -> Debates:
    return civilization.commons(setup.templates).debates


def _one_move(setup: Setup, ask: Ask, debates: Debates, d: Debate, me: str) -> Debate:
    """One structured call for the move; a refused move is retried once with the reason,
    then the turn passes."""
    persona = debates.thread(d.id).get("personas", {}).get(me, "")
    reason = ""
    # Every attempt of this turn counts against the debate's cost target, refused or not.
    calls, spent = ask.meter.calls, ask.meter.spent
    tokens = ask.meter.tokens_in + ask.meter.tokens_out
    for _ in range(2):
        situation = d.situation(me)
        if situation["steelman_of_you_to_grade"]:
            # The plan's mitigation for graders who pass nearly everything: a flagged
            # grader sees its own record when it grades (the prompt says what it means).
            grading = debates.graders().get(me)
            if grading and grading["lenient"]:
                situation["your_grading"] = grading
        if reason:
            situation["your_last_move_was_refused_because"] = reason
        prompt = setup.templates.prompt("debater", name=me, persona=persona,
                                        situation_json=json.dumps(situation, indent=1))
        text = setup.templates.wake_prompt("DEBATE", debate_id=d.id, stage=d.stage,
                                           instructions=prompt)
        others = [p for p in d.participants if p != me] or [me]
        schema = setup.templates.schema(
            "debate_move", moves=[m for m in d.allowed() if m != "PASS"] or ["PASS"],
            others=others, sides=list(SIDES), grades=list(GRADES))
        # The seed: the fast model for dialogue, the primary for crystallization (the
        # crux-lock stage, whose commitments become the debate's result).
        tier = "primary" if d.stage == "CRUX_LOCK" else "fast"
        move = ask(text, schema, f"debate_{d.stage.lower()}", max_tokens=700, tier=tier)
        move["cost"] = {"calls": ask.meter.calls - calls,
                        "usd": round(ask.meter.spent - spent, 6),
                        "tokens": ask.meter.tokens_in + ask.meter.tokens_out - tokens}
        try:
            return debates.move(d.id, me, move)
        except IllegalMove as exc:
            reason = exc.reason
            d = debates.load(d.id)
    return debates.move(d.id, me, {"move": "PASS", "content": f"refused twice: {reason}"[:600],
                                   "cost": {"calls": ask.meter.calls - calls,
                                            "usd": round(ask.meter.spent - spent, 6)}})


def _start_from_task(debates: Debates, setup: Setup, env: ToolEnv) -> str:
    """`[debate] <topic>` mail: this citizen and up to two peers debate the topic."""
    task = env.task
    assert task is not None  # noqa: S101 - begin() claimed it
    subject = str(task.meta.get("subject", ""))
    topic = subject.split("]", 1)[1].strip() if "]" in subject else ""
    if not topic:
        body = task.text.split("\n\n", 1)[-1]
        topic = body.strip().splitlines()[0] if body.strip() else ""
    me = setup.home.name
    peers = _volunteers(topic, me, debates.citizens, key=f"debate-{task.id}") if topic else []
    try:
        d = debates.start(topic, [me, *peers], me,
                          personas={n: civilization.persona(setup.templates, n)
                                    for n in [me, *peers]},
                          budgets=_budgets(setup),
                          source={k: task.meta[k] for k in ("from", "subject", "message_id")
                                  if k in task.meta},
                          usd_cap=setup.config.budget.max_usd_per_debate)
    except SharedError as exc:
        return f"could not start a debate: {exc}"
    if d.owed_by() != me:
        civilization.commons(setup.templates).ring(d.owed_by(), "DEBATE", f"move in {d.id}",
                                                   sender=me)
    return (f"debate {d.id} started among {', '.join(d.participants)} on: {topic}. "
            "The crux and the transcript will follow by mail.")


def _volunteers(topic: str, me: str, citizens: list[str], *, key: str) -> list[str]:
    """Two peers for a debate: who volunteers (a stream), then the first others to fill
    up - the operator asked for this debate, so it happens with or without volunteers."""
    others = [c for c in citizens if c != me]
    try:
        found = volunteers(f"A structured debate on: {topic}\nClaim it to join as one of "
                           f"{PEERS} participants with {me}; defer if you have little to add.",
                           key=key, by=me, among=others, wanted=PEERS) if others else []
    except SharedError as exc:  # no decision in time: fill up as before
        log.warning("no volunteers for %s: %s", key, exc)
        found = []
    return sorted([*found, *[c for c in others if c not in found]][:PEERS])


def _budgets(setup: Setup) -> dict[str, tuple[int, int]] | None:
    """The citizen's configured budgets over the seed's (scaled) defaults, if any."""
    mine = setup.config.debate_budgets
    if not mine:
        return None
    return {**scaled_budgets(3), **mine}


def _notices_due(debates: Debates, me: str, mailed: list[str]) -> list[str]:
    due = []
    for did in debates.ids():
        if did in mailed or debates.result(did) is None:
            continue
        t = debates.thread(did)
        if t.get("started_by") == me and (t.get("source") or {}).get("from"):
            due.append(did)
    return due


def _send_notices(setup: Setup, env: ToolEnv, debates: Debates, me: str) -> None:
    mailed = list(setup.marks.get(MAILED, []))
    due = _notices_due(debates, me, mailed)
    if not due:
        return
    for did in due:
        t, crux = debates.thread(did), debates.result(did) or {}
        transcript = debates.transcript(did)
        body = (f"The debate on '{t['topic']}' has ended.\n\nCrux "
                f"({'validated' if crux.get('validated') else 'not validated'}):\n"
                f"{json.dumps(crux, indent=1, ensure_ascii=False)}\n\n{transcript}")
        src = t.get("source", {})
        note = notice(setup.home, str(src["from"]),
                      f"Re: {src.get('subject') or '[debate] ' + t['topic']}", body,
                      in_reply_to=str(src.get("message_id", "")))
        env.event("debate_notice", debate=did, to=src.get("from"), note=note)
        mailed.append(did)
    state.mark(setup.home, MAILED, mailed)
