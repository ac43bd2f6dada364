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

from citizen import civilization, paths, state
from citizen.errors import ProviderError, StructuredOutputError
from citizen.tools.base import ToolEnv
from citizen.wakes.base import Ask, Ending, Gate, Setup, WakeType
from citizen.wakes.stream import volunteers
from citizen.wakes.task import finish_task
from shared import doorbell
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
_S = {"type": "string", "maxLength": 600}
_SHORT = {"type": "string", "maxLength": 160}


def move_schema(d: Debate, me: str) -> dict[str, Any]:
    others = [p for p in d.participants if p != me] or [me]
    return {
        "type": "object", "additionalProperties": False, "required": ["move", "content"],
        "properties": {
            "move": {"enum": [m for m in d.allowed() if m != "PASS"] or ["PASS"]},
            "content": _S,
            "target": {"enum": others},
            "side": {"enum": list(SIDES)},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "grade": {"enum": list(GRADES)},
            "question": _SHORT,
            "falsifier": {"type": "object", "additionalProperties": False,
                          "required": ["metric", "threshold", "deadline"],
                          "properties": {"metric": _SHORT, "threshold": _SHORT,
                                         "deadline": {"type": "string", "maxLength": 10},
                                         "reasoning": _SHORT}},
            "top_claim": {"type": "object", "additionalProperties": False,
                          "required": ["statement", "side"],
                          "properties": {"statement": _SHORT,
                                         "side": {"enum": ["YES", "NO", "NUANCED"]},
                                         "confidence": {"type": "number", "minimum": 0,
                                                        "maximum": 1}}},
        },
    }


class DebateWake(WakeType):
    name = "DEBATE"
    loop = False

    def gate(self, setup: Setup) -> Gate:
        me = setup.home.name
        task_id = setup.tasks.next_of("DEBATE")
        debates = civilization.debates()
        owed = [d.id for d in debates.owed(me)]
        notices = _notices_due(debates, me, setup.marks.get(MAILED, []))
        if not (owed or task_id or notices):
            return Gate(False, "no debate move is owed by me and no debate task waits")
        parts = [f"my move in {', '.join(owed)}"] if owed else []
        parts += [f"debate task {task_id}"] if task_id else []
        parts += [f"{len(notices)} cruxes to mail"] if notices else []
        return Gate(True, "; ".join(parts), {"task_id": task_id})

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        if gate.data.get("task_id"):
            env.task = setup.tasks.claim(gate.data["task_id"])
        return "make the debate moves I owe"

    def act(self, setup: Setup, gate: Gate, env: ToolEnv, ask: Ask) -> Ending:
        me = setup.home.name
        debates = civilization.debates()
        done: list[str] = []
        if env.task is not None:
            env.task_outcome = ("done", _start_from_task(debates, setup, env))
            done.append(env.task_outcome[1])
        for _ in range(MAX_MOVES):
            owed = debates.owed(me)
            if not owed:
                break
            d = owed[0]
            try:
                after, kind = _one_move(setup, ask, debates, d, me)
            except (ProviderError, StructuredOutputError) as exc:
                _log(env, "debate_move_failed", debate=d.id, reason=str(exc)[:500])
                if not _count_failure(setup, d):
                    return Ending("provider_error", f"move in {d.id}: {exc}", "; ".join(done))
                after, kind = debates.move(d.id, me, {"move": "PASS", "content":
                                                       f"no move: {str(exc)[:200]}"}), "PASS"
            done.append(f"{kind} in {d.id} ({after.stage})")
            _log(env, "debate_move", debate=d.id, move=kind, stage=after.stage,
                 next=after.owed_by())
            _ring(after, me)
            if not after.active:  # the starter mails the crux to whoever asked for it
                _ring_starter(debates, after, me)
        _send_notices(setup, env, debates, me)
        return Ending("end_turn", text="; ".join(done) or "no move was owed any more")

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        if env.task is not None:
            status, result = env.task_outcome or ("failed", ending.reason or ending.status)
            finish_task(setup, env, env.task, status, result)
        return (ending.text or ending.reason or ending.status)[:300]


def _one_move(setup: Setup, ask: Ask, debates: Debates, d: Debate,
              me: str) -> tuple[Debate, str]:
    """One structured call for the move; a refused move is retried once with the reason,
    then the turn passes."""
    persona = debates.thread(d.id).get("personas", {}).get(me, "")
    reason = ""
    for _ in range(2):
        situation = d.situation(me)
        if reason:
            situation["your_last_move_was_refused_because"] = reason
        prompt = setup.templates.prompt("debater", name=me, persona=persona,
                                        situation_json=json.dumps(situation, indent=1))
        text = setup.templates.wake_prompt("DEBATE", debate_id=d.id, stage=d.stage,
                                           instructions=prompt)
        calls, spent = ask.meter.calls, ask.meter.spent
        tokens = ask.meter.tokens_in + ask.meter.tokens_out
        move = ask(text, move_schema(d, me), f"debate_{d.stage.lower()}", max_tokens=700)
        move["cost"] = {"calls": ask.meter.calls - calls,
                        "usd": round(ask.meter.spent - spent, 6),
                        "tokens": ask.meter.tokens_in + ask.meter.tokens_out - tokens}
        try:
            return debates.move(d.id, me, move), str(move.get("move"))
        except IllegalMove as exc:
            reason = exc.reason
            d = debates.load(d.id)
    return debates.move(d.id, me, {"move": "PASS",
                                   "content": f"refused twice: {reason}"[:600]}), "PASS"


def _count_failure(setup: Setup, d: Debate) -> bool:
    """Count a failed turn; True once the turn should pass."""
    key = f"{d.id}:{d.seq}"
    failures = dict(setup.marks.get(FAILURES, {}))
    failures[key] = int(failures.get(key, 0)) + 1
    setup.marks[FAILURES] = failures
    state.mark(setup.home, FAILURES, failures)
    return int(failures[key]) >= MAX_FAILURES


def _log(env: ToolEnv, event: str, **data: Any) -> None:
    if env.log is not None:
        env.log.event(event, **data)


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
                                  if k in task.meta})
    except SharedError as exc:
        return f"could not start a debate: {exc}"
    _ring(d, me)
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


def _ring(d: Debate, me: str) -> None:
    who = d.owed_by()
    if who in ("", me):
        return
    try:
        doorbell.ring(paths.home(who).doorbell, "DEBATE", f"move in {d.id}", sender=me)
    except OSError as exc:  # the debate waits for that citizen's slot wake instead
        log.warning("could not ring %s for %s: %s", who, d.id, exc)


def _ring_starter(debates: Debates, d: Debate, me: str) -> None:
    starter = str(debates.thread(d.id).get("started_by", ""))
    if starter != me and starter in debates.citizens:
        try:
            doorbell.ring(paths.home(starter).doorbell, "DEBATE", f"{d.id} ended", sender=me)
        except OSError as exc:
            log.warning("could not ring %s for %s: %s", starter, d.id, exc)


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
    from citizen.mail import MailError, account  # noqa: PLC0415 - mail requesters only
    from citizen.mail.outbox import notice  # noqa: PLC0415

    for did in due:
        t, crux = debates.thread(did), debates.result(did) or {}
        transcript = (debates.dir / did / "transcript.md").read_text(encoding="utf-8")
        body = (f"The debate on '{t['topic']}' has ended.\n\nCrux "
                f"({'validated' if crux.get('validated') else 'not validated'}):\n"
                f"{json.dumps(crux, indent=1, ensure_ascii=False)}\n\n{transcript}")
        src = t.get("source", {})
        try:
            note = notice(setup.home, account(env.secrets), str(src["from"]),
                          f"Re: {src.get('subject') or '[debate] ' + t['topic']}", body,
                          in_reply_to=str(src.get("message_id", "")))
        except MailError as exc:
            note = f"not sent: {exc}"
        _log(env, "debate_notice", debate=did, to=src.get("from"), note=note)
        mailed.append(did)
    state.mark(setup.home, MAILED, mailed)
