"""STREAM wakes: bid on messages that reached several citizens, and answer only if granted.

The gate is deterministic (the stream records): no open stream for this citizen means
an idle wake. For each open one: a fast structured bid (a rule when the model cannot
be asked), adjusted by the room's temperature and this citizen's calibration, written
as its thought; then the decision - computed by whoever gets there first, the same for
all - and only a granted citizen generates, inside the shared model's semaphore.
Every bid leaves a decision record (what it saw, what it did) for replay.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from citizen import civilization
from citizen.errors import ProviderError, StructuredOutputError
from citizen.home.tasks import TaskQueue
from citizen.llm.base import Request
from citizen.tools.base import ToolEnv
from citizen.wake.meter import Ending
from citizen.wake.types.base import Ask, Gate, Setup, WakeType
from shared import clock
from shared.errors import LockTimeout, SharedError
from shared.streams import (
    GRANTED,
    HIGH_PRESSURE,
    Semaphore,
    Streams,
    load_factor,
    temperature_bias,
)

log = logging.getLogger(__name__)

RECENT = 50  # streams a gate looks at (the newest)
EXPERT_BOOST = 0.2  # the seed's context-aware selection (§10.3)
MAX_ANSWER_FAILURES = 3  # then the stream is closed with the error as the answer
# How long past its window a bidder waits for the decision. A wait that ends undecided
# (the room paused, every other bidder gone) is no error: the stream stays listed for
# its bidders (`Streams.waiting_for`) and a later wake decides it.
DECISION_GRACE_S = 10.0


def open_streams(streams: Streams, me: str) -> list[str]:
    """Streams addressed to me where I have not bid, or was granted and not answered."""
    return streams.waiting_for(me, RECENT)


def held_streams(setup: Setup) -> dict[str, str]:
    """Stream id → task id of the mail tasks I hold until their stream decides."""
    return {str(t.meta.get("stream")): t.id for t in TaskQueue(setup.home.tasks).held()}


def pending(setup: Setup, streams: Streams, held: dict[str, str]) -> list[str]:
    return list(dict.fromkeys([*open_streams(streams, setup.home.name), *held]))


def _take_up(setup: Setup, task_id: str, note: str) -> None:
    """A held mail task becomes mine to do: queued, and my TASK wake rung."""
    TaskQueue(setup.home.tasks).release(task_id, note)
    civilization.commons(setup.templates).ring(setup.home.name, "TASK", f"mail task {task_id}")


class StreamWake(WakeType):
    name = "STREAM"
    loop = False

    def gate(self, setup: Setup) -> Gate:
        waiting = pending(setup, civilization.streams(), held_streams(setup))
        if not waiting:
            return Gate(False, "no message waits for my bid or my answer")
        return Gate(True, f"{len(waiting)} streams: {', '.join(waiting[:5])}")

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        return "bid on the messages addressed to several citizens"

    def act(self, setup: Setup, gate: Gate, env: ToolEnv, ask: Ask) -> Ending:
        streams = civilization.streams()
        sem = streams.semaphore(ask.llm.max_concurrent)
        done = []
        held = held_streams(setup)  # read once: each stream's step moves its own task
        for sid in pending(setup, streams, held):
            try:
                done.append(_take(setup, env, ask, streams, sem=sem, sid=sid,
                                  task_id=held.get(sid)))
            except SharedError as exc:  # another daemon's step raced ours; logged, not fatal
                env.event("stream_refused", stream=sid, reason=str(exc))
                if sid in held and not streams.exists(sid):  # never lose the mail
                    _take_up(setup, held[sid], f"no stream: {exc}")
                    done.append(f"{sid}: unreadable, took task {held[sid]} myself")
        return Ending("end_turn", text="; ".join(done) or "nothing waited any more")


def _take(setup: Setup, env: ToolEnv, ask: Ask, streams: Streams, *, sem: Semaphore,
          sid: str, task_id: str | None) -> str:
    """Bid (once), read the decision, and act on it; `task_id`: the mail task I hold."""
    me = setup.home.name
    info = streams.info(sid)
    record = _bid_once(setup, env, ask, streams, sem=sem, sid=sid, info=info)
    uncoordinated = not info["settings"].get("coordinate", True) and info.get("source") not in (
        "mail", "volunteer")
    if uncoordinated and record["claim"]:
        # No coordination (the seed's baseline, §1.1): a claimer generates at once, waiting
        # for nobody's bid (`floor`); the last bidder records the decision.
        decision: Mapping[str, Any] = streams.try_decide(sid, me) or {}
    else:
        try:
            decision = streams.wait_decision(sid, me, timeout_s=info["settings"][
                "intention_window_ms"] / 1000 + DECISION_GRACE_S)
        except LockTimeout as exc:  # the seed's TIMEOUT action; decided by a later wake
            record.update(action="TIMEOUT", error=str(exc)[:300])
            streams.record(sid, me, record)
            env.event("stream_undecided", stream=sid, reason=str(exc)[:300])
            return f"{sid}: undecided (a later wake decides it)"
    s = streams.load(sid)
    record["competing"] = {c: {"claiming": t.claiming, "confidence": t.confidence}
                           for c, t in s.thoughts.items() if c != me}
    record["decision"] = {k: decision.get(k) for k in (
        "granted", "denied", "silent", "slots", "exit", "decided_at_ms", "decided_by",
        "fallback", "reasoning")}
    floor = streams.floor(sid, me)  # granted, or an override/interjection the room allows
    if info.get("source") == "mail":
        return _mail(setup, env, streams, sid=sid, decision=decision, record=record,
                     task_id=task_id)
    if info.get("source") == "volunteer":  # the asker reads the decision; nothing to say
        record["action"] = "VOLUNTEERED" if floor == GRANTED else "SILENT"
        if floor == GRANTED:
            streams.respond(sid, me, "I volunteer")
        streams.record(sid, me, record)
        env.event("stream_volunteer", stream=sid, action=record["action"])
        return f"{sid}: {record['action']}"
    if not floor:
        record["action"] = "SILENT"
        streams.record(sid, me, record)
        env.event("stream_silent", stream=sid, exit=decision.get("exit"))
        return f"{sid}: SILENT"
    started, wall = time.monotonic(), clock.time()
    calls, tokens = ask.meter.calls, ask.meter.tokens_in + ask.meter.tokens_out
    coordinated = bool(info["settings"].get("coordinate", True))
    try:
        with sem.slot(timeout_s=300) if coordinated else _no_slot() as waited:
            prompt = setup.templates.prompt("stream_answer", name=me, focus=setup.config.focus,
                                            room=info["room"], text=info["text"])
            reply = ask.meter.call(ask.llm, Request(
                messages=[{"role": "user", "content": prompt}], system=ask.system,
                max_tokens=400, tier="primary", purpose="stream_answer"))
    except (ProviderError, LockTimeout) as exc:  # counted: a granted answer is tried 3 times
        record["answer_failures"] = int(record.get("answer_failures", 0)) + 1
        record["action"], record["error"] = "FAILED", str(exc)[:300]
        if record["answer_failures"] >= MAX_ANSWER_FAILURES:
            streams.respond(sid, me, f"(no answer: {str(exc)[:200]})", failed=True)
        streams.record(sid, me, record)
        env.event("stream_failed", stream=sid, error=str(exc)[:300],
             attempts=record["answer_failures"])
        return f"{sid}: FAILED ({record['answer_failures']}/{MAX_ANSWER_FAILURES})"
    figures = {"started": wall, "latency_s": round(time.monotonic() - started, 3),
               "queued_s": round(waited, 3), "calls": ask.meter.calls - calls,
               "tokens": ask.meter.tokens_in + ask.meter.tokens_out - tokens,
               "model": reply.model}
    streams.respond(sid, me, reply.text, **figures)
    streams.heat(info["room"], "serviced")
    record.update(action="POSTED", floor=floor, response=reply.text[:4000], **figures)
    streams.record(sid, me, record)
    env.event("stream_posted", stream=sid, **figures)
    return f"{sid}: POSTED"


def _mail(setup: Setup, env: ToolEnv, streams: Streams, *, sid: str,
          decision: Mapping[str, Any], record: dict[str, Any], task_id: str | None) -> str:
    """A mail stream: the granted take up the held task (its TASK wake answers by
    mail); the others file it as left to them. Each step is safe to repeat."""
    me, granted = setup.home.name, decision["granted"]
    if me in granted:
        if task_id is not None:
            _take_up(setup, task_id, f"granted by {sid} ({decision['exit']})")
        if me not in streams.responses(sid):
            streams.respond(sid, me, f"took the mail as task {task_id or '(already queued)'}",
                            task=task_id)
        record["action"] = "TOOK_TASK"
    else:
        if task_id is not None:
            who = ", ".join(granted) or "nobody"
            TaskQueue(setup.home.tasks).dismiss(task_id, f"left to {who} "
                                                f"({sid}: {decision['exit']})")
        record["action"] = "SILENT"
    streams.record(sid, me, record)
    env.event("stream_mail", stream=sid, action=record["action"], task=task_id)
    return f"{sid}: {record['action']}"


@contextmanager
def _no_slot() -> Iterator[float]:
    yield 0.0


def seen_system(env: ToolEnv, system: list[str]) -> dict[str, Any]:
    """The system prompt and contexts a bid saw, as the keys of its own wake log's
    blobs (§9.2 ragContext). Keys only: the record sits in the commons every citizen
    reads, the contexts stay in this citizen's home, stored once and redacted of
    secrets like every blob; the wake log names them, so retention keeps them."""
    keys = [env.log.blob(block) for block in system] if env.log is not None else []
    if env.log is not None:
        env.event("stream_bid_system", system_blobs=keys)
    return {"system_blobs": keys, "wake": env.log.number if env.log is not None else None}


def _bid(setup: Setup, env: ToolEnv, ask: Ask, streams: Streams, *, sem: Semaphore, sid: str,
         info: dict[str, Any]) -> dict[str, Any]:
    """The bid and what it saw: a fast structured call, or a rule when that fails."""
    me = setup.home.name
    room = streams.room(info["room"])
    temperature = float(room["temperature_now"])
    pressure = sem.pressure()
    thoughts = streams.load(sid).thoughts
    others = sorted(thoughts)
    mentioned = me in info["mentions"]
    activity = streams.activity(info["room"], clock.time())
    settings = info["settings"]
    values = prompt_values(
        room=info["room"], temperature=temperature, pressure=pressure, mentioned=mentioned,
        present=room.get("present"), from_person=bool(info.get("human")),
        activity=activity, competing={c: (t.claiming, t.confidence)
                                      for c, t in thoughts.items() if c != me},
        overrides=bool(settings.get("allow_overrides")))
    prompt = setup.templates.prompt("bid", name=me, focus=setup.config.focus,
                                    text=info["text"], **values)
    focus_words = {w.lower().strip(".,;:") for w in setup.config.focus.split() if len(w) > 3}
    knows = any(w in info["text"].lower() for w in focus_words)
    started, tokens = time.monotonic(), ask.meter.tokens_in + ask.meter.tokens_out
    mode, serial = setup.config.stream_bid, ask.llm.max_concurrent <= 1
    override = False  # a rule bid never overrides: only a model's judgement may
    if mode == "rule" or (mode == "auto" and (serial or pressure > HIGH_PRESSURE)):
        # On a one-at-a-time server a bid waits in line with the answers it should save
        # (bench/streams.py: model bids made coordinated answers slower, not faster).
        why = ("configured" if mode == "rule" else "the model serves one request at a time"
               if serial else f"the model's queue is {pressure} deep")
        claim, raw, how, reasoning = _rule(mentioned, knows, why)
    else:
        try:
            data = ask(prompt, setup.templates.schema("stream_bid"), "stream_bid",
                       max_tokens=120, tier="fast")
            raw, claim, how = float(data["confidence"]), bool(data["claim"]), "model"
            reasoning, override = str(data["reasoning"]), bool(data.get("override"))
        except (ProviderError, StructuredOutputError) as exc:
            claim, raw, how, reasoning = _rule(mentioned, knows,
                                               f"model unavailable: {str(exc)[:80]}")
    factor = float(streams.calibration(me)["factor"])  # §10.2
    answered = streams.answered(since=time.time() - 3600)  # vs file mtimes: wall
    load = load_factor(answered.get(me, 0), answered.values())  # §10.4
    expertise = EXPERT_BOOST if knows else 0.0  # §10.3: the message is in my focus
    adjusted = min(1.0, max(0.0, raw * factor * load + expertise
                            + temperature_bias(temperature)))
    return {"stream": sid, "message_id": info["message_id"], "prompt": prompt,
            "prompt_values": values, "override": override and claim,
            **seen_system(env, ask.system),
            "ambient": {"room": info["room"], "temperature": round(temperature, 3),
                        "pressure": pressure, "mentioned": mentioned, "bid_before": others,
                        "answers_last_hour": answered.get(me, 0),
                        # None: nobody said whether a person is in the room (room presence)
                        "user_present": room.get("present"),
                        "from_person": bool(info.get("human")), **activity,
                        "competing": {c: {"claiming": t.claiming, "confidence": t.confidence}
                                      for c, t in thoughts.items() if c != me}},
            "claim": claim, "raw_confidence": raw, "calibration_factor": factor,
            "load_factor": round(load, 3), "expertise_boost": expertise,
            "confidence": round(adjusted, 4), "reasoning": reasoning[:500], "how": how,
            "bid_latency_s": round(time.monotonic() - started, 3),
            "bid_tokens": ask.meter.tokens_in + ask.meter.tokens_out - tokens,
            "model": setup.config.seat("fast").model}


def prompt_values(*, room: str, temperature: float, pressure: int, mentioned: bool,
                  present: bool | None, from_person: bool, activity: Mapping[str, Any],
                  competing: Mapping[str, tuple[bool, float]], overrides: bool
                  ) -> dict[str, Any]:
    """The ambient state a bid's prompt shows (§8.2, §9.2): temperature, pressure,
    whether a person is here, time since the room's last answer, messages in the last
    minute, and the bids already made. Kept in the record, so a replay - as this
    citizen or another - renders the same state."""
    since = activity.get("time_since_last_response_s")
    bids = "; ".join(f"{c} {'claims' if claiming else 'defers'} ({conf:.2f})"
                     for c, (claiming, conf) in sorted(competing.items()))
    return {"room": room, "temperature": f"{temperature:.2f}", "pressure": pressure,
            "mentioned": mentioned, "from_person": "yes" if from_person else "no",
            "present": "unknown" if present is None else "yes" if present else "no",
            "since_last": "no answer yet" if since is None else f"{since:.0f} s",
            "per_minute": int(activity.get("messages_in_last_minute", 0)),
            "others": bids or "nobody yet",
            "overrides": "yes" if overrides else "no"}


def _rule(mentioned: bool, knows: bool, why: str) -> tuple[bool, float, str, str]:
    """The bid without a model: claim when named or when the message is in my focus."""
    raw = 0.8 if mentioned else 0.5 if knows else 0.2
    return mentioned or knows, raw, "rule", f"mention/focus rule ({why})"


def _bid_once(setup: Setup, env: ToolEnv, ask: Ask, streams: Streams, *, sem: Semaphore,
              sid: str, info: dict[str, Any]) -> dict[str, Any]:
    """My bid's record: the one kept, else a new bid (written with its record at once,
    so a stream reopened after my wait ended is decided, not bid on again)."""
    me = setup.home.name
    record = streams.read_record(sid, me) or _my_bid(streams, sid, me)
    if record:
        return record
    # decided before I got here: a bid is waste - unless the room takes interjections,
    # or does not coordinate (every claimer speaks, `floor`)
    interjecting = bool(info["settings"].get("enable_interruptions")) or not info[
        "settings"].get("coordinate", True)
    if streams.decision(sid) is not None and not interjecting:
        record = _late(setup, streams, sid=sid, info=info)
    else:
        record = _bid(setup, env, ask, streams, sem=sem, sid=sid, info=info)
    streams.think(sid, me, record["claim"], record["confidence"], record["reasoning"],
                  override=bool(record.get("override")))
    streams.record(sid, me, {**record, "action": "BID"})
    return record


def _my_bid(streams: Streams, sid: str, me: str) -> dict[str, Any]:
    """The record of a bid whose wake ended before it kept one (killed between the
    two): rebuilt from the bid, so the stream is decided, not bid on again."""
    t = streams.load(sid).thoughts.get(me)
    if t is None:
        return {}
    return {"stream": sid, "claim": t.claiming, "raw_confidence": t.confidence,
            "confidence": t.confidence, "reasoning": t.reasoning, "how": "recovered",
            "calibration_factor": 1.0}


def _late(setup: Setup, streams: Streams, *, sid: str, info: dict[str, Any]) -> dict[str, Any]:
    """The record of a citizen that came after the decision: no model call, no claim."""
    return {"stream": sid, "message_id": info["message_id"], "prompt": "",
            "ambient": {"room": info["room"], "bid_before": sorted(streams.load(sid).thoughts)},
            "claim": False, "raw_confidence": 0.0, "calibration_factor": 1.0,
            "confidence": 0.0, "reasoning": "decided before my bid", "how": "late",
            "bid_latency_s": 0.0, "model": setup.config.seat("fast").model}


def volunteers(text: str, *, key: str, by: str, among: list[str], wanted: int) -> list[str]:
    """Ask `among` who volunteers for a piece of work (`text` says what): a stream in
    the volunteers room with `wanted` slots; waits for its decision (the room's window
    at most) and returns the volunteers, perhaps fewer than wanted - the caller fills
    up. `key` names the work, so asking again after a crash finds the same stream."""
    streams = civilization.streams()
    s = streams.open(f"<volunteer-{key}@experience>", text, room="volunteers",
                     participants=among, sender=by, source="volunteer", fixed_slots=wanted)
    if streams.decision(s.id) is None:
        for name in s.participants:
            civilization.commons().ring(name, "STREAM", f"volunteers {s.id}", sender=by)
    decision = streams.wait_decision(s.id, by, timeout_s=s.settings.intention_window_ms
                                     / 1000 + 5, every_s=0.2)
    return sorted(decision["granted"])


def reopen(sid: str, *, sender: str = "operator") -> list[str]:
    """Ring every participant of stream `sid` (`citizen stream reopen`, a room resumed):
    a bidder's STREAM wake decides an undecided stream from the bids that arrived (its
    window long past), and a granted one answers. Returns whom it rang."""
    streams = civilization.streams()
    names = [str(n) for n in streams.info(sid)["participants"]]
    for name in names:
        civilization.commons().ring(name, "STREAM", f"reopened {sid}", sender=sender)
    return names


def say(text: str, *, room: str = "general", to: list[str] | None = None,
        sender: str = "operator") -> str:
    """Open a stream for a broadcast and ring every addressed citizen (the CLI's `say`)."""
    streams = civilization.streams()
    message_id = f"<say-{time.time_ns()}@experience>"
    s = streams.open(message_id, text, room=room, participants=to, sender=sender,
                     pressure=streams.semaphore().pressure())
    streams.heat(room, "human")
    for name in s.participants:
        civilization.commons().ring(name, "STREAM", f"message {s.id}", sender=sender)
    return s.id
