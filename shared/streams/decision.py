"""Who answers a message that reached several citizens: the pure decision.

`decide(stream, now)` is a pure function of a stream's bids and the clock: slots drawn
70/25/5 from a seed derived from the message id, claims by confidence, the minimum
confidence, @mention override, and the seed's early exits. Any daemon can compute it;
all of them get the same answer. No files here (`shared.streams.store` keeps them).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from shared.errors import Invalid

SLOT_WEIGHTS = (0.70, 0.25, 0.05)  # 1, 2 or 3 slots (§2.3)
# The seed's governance levels (§0.2 strict, balanced, anarchic; §6.2 aggressive, §6.3
# conservative). §6 gives ranges ("2-3", "1-2") without a split: the 70/25/5 draw kept
# within the range (25/5 -> 5/6, 1/6; 70/25 -> 14/19, 5/19), so each range keeps the
# seed's "fewer voices are likelier". A preset's `idle_slots` is the cap when the
# model's queue is empty (§10.1: 3); strict and conservative keep their own caps (one
# voice per message, and "fewer responses"), which an operator chose them for.
PRESETS: dict[str, dict[str, Any]] = {
    "strict": {"max_responders": 1, "min_confidence": 0.7, "intention_window_ms": 3000,
               "require_unanimity": True, "idle_slots": 1},
    "conservative": {"max_responders": 2, "min_confidence": 0.5,
                     "intention_window_ms": 3000, "slot_weights": (14 / 19, 5 / 19),
                     "idle_slots": 2},
    "balanced": {"max_responders": 2, "min_confidence": 0.3, "intention_window_ms": 1000,
                 "allow_overrides": True},
    "aggressive": {"max_responders": 3, "min_confidence": 0.2, "intention_window_ms": 1000,
                   "slot_weights": (0.0, 5 / 6, 1 / 6)},
    "anarchic": {"max_responders": 5, "min_confidence": 0.1, "intention_window_ms": 500,
                 "enable_interruptions": True},
}
CLEAR_WINNER = 0.9
HIGH_PRESSURE = 3  # queue depth above which one slot only (§10.1)
PRESSED_MIN_CONFIDENCE = 0.7  # the minimum confidence under high pressure (§10.5)
IDLE_SLOTS = 3  # the cap when nothing waits for the model (§10.1)
# Without coordination every claimer answers: wait for every bid (or this long).
UNCOORDINATED_WAIT_MS = 60_000
_MENTION = re.compile(r"@([a-z][a-z0-9_-]{1,31})")


class ThoughtRecord(TypedDict, total=False):
    """A bid as its author writes it (`thoughts/<author>.json`)."""

    author: str
    claiming: bool
    confidence: float  # 0..1, clamped
    reasoning: str
    ts: str  # clock.now(); older records carry epoch seconds


class DecisionRecord(TypedDict, total=False):
    """The decision as whoever computed it first writes it (`decision.json`)."""

    granted: list[str]
    denied: list[str]
    silent: list[str]
    slots: int
    exit: str  # clear_winner, all_slots_claimed, everyone_decided, window
    decided_at_ms: int  # after the stream opened
    fallback: bool
    reasoning: str  # who was granted and why the others were not (§3.1)
    moderated: list[str]  # the silenced it applied (the room's, live)
    decided_by: str
    author: str  # the same citizen: the author of the record
    ts: str


@dataclass(frozen=True)
class Settings:
    """A room's governance: a preset plus the moderator's adjustments."""

    max_responders: int = 2
    min_confidence: float = 0.3
    intention_window_ms: int = 1000
    slot_weights: tuple[float, ...] = SLOT_WEIGHTS
    silenced: tuple[str, ...] = ()
    boosted: tuple[tuple[str, float], ...] = ()  # (citizen, added confidence)
    # False: no coordination at all - every claimer answers, no admission control (the
    # baseline the seed measures against; for benchmarks, not for rooms people use).
    coordinate: bool = True
    # A person's message never goes unanswered: when nobody claims (or no claim reaches
    # the minimum), the most confident bidder answers anyway. Citizens' messages may.
    answer_humans: bool = True
    # Work seeking volunteers wants exactly this many (no draw, no shrinking under
    # pressure: volunteering is not a generation). 0: drawn as the seed says.
    fixed_slots: int = 0
    # Floor control (§0.2). Strict: no early exit - every participant bids (or the
    # window closes) before anyone is given the floor or left silent.
    require_unanimity: bool = False
    # Balanced: a denied claimer whose bid says it must speak may answer anyway.
    allow_overrides: bool = False
    # Anarchic: a citizen that bids after the decision may still interject.
    enable_interruptions: bool = False
    idle_slots: int = IDLE_SLOTS  # the cap when nothing waits for the model (§10.1)
    paused: bool = False  # the moderator's "everyone take a beat" (§0.3): nobody speaks

    @classmethod
    def preset(cls, name: str, **changes: Any) -> Settings:
        """A preset with changes. :raises Invalid: no such preset, or unknown settings."""
        if name not in PRESETS:
            raise Invalid(f"no preset '{name}' (presets: {', '.join(PRESETS)})")
        unknown = set(changes) - set(cls.__dataclass_fields__)
        if unknown:
            raise Invalid(f"unknown room settings: {', '.join(sorted(unknown))}")
        if "max_responders" in changes and "idle_slots" not in changes:
            # a cap the room or its moderator set holds when the queue is empty, too
            changes = {**changes, "idle_slots": changes["max_responders"]}
        data = {"idle_slots": IDLE_SLOTS, **PRESETS[name], **changes}
        return cls.from_dict({**data, "slot_weights": many_voices(data)})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        """Settings as stored; a stream opened before `idle_slots` never widens (its
        decision is checked again by readers, and must come out the same)."""
        flags = {k: bool(data.get(k, False)) for k in (
            "require_unanimity", "allow_overrides", "enable_interruptions", "paused")}
        return cls(int(data["max_responders"]), float(data["min_confidence"]),
                   int(data["intention_window_ms"]), tuple(data.get("slot_weights",
                                                                     SLOT_WEIGHTS)),
                   tuple(data.get("silenced", ())),
                   tuple((str(c), float(b)) for c, b in data.get("boosted", ())),
                   bool(data.get("coordinate", True)), bool(data.get("answer_humans", True)),
                   int(data.get("fixed_slots", 0)), **flags,
                   idle_slots=int(data.get("idle_slots", data["max_responders"])))


def many_voices(data: Mapping[str, Any]) -> tuple[float, ...]:
    """The slot weights of a room: the 70/25/5 draw (or the preset's own) gives 1 to 3
    voices (§2.3, §6.1 "1-3 probabilistic"); a room that asks for more than its draw can
    give - anarchic's `maxResponders: 5` (§0.2, "many voices welcome"), a moderator's
    "let's hear more perspectives" (`--max-responders 5`) - has every one of its
    responders' slots, not a draw of 1-3 capped at 5. Kept in the stream's settings, so
    a stream opened before keeps the draw its decision was made with."""
    weights = tuple(float(w) for w in data.get("slot_weights", SLOT_WEIGHTS))
    most = int(data["max_responders"])
    return weights if most <= len(weights) else (0.0,) * (most - 1) + (1.0,)


@dataclass(frozen=True)
class Thought:
    citizen: str
    claiming: bool
    confidence: float
    reasoning: str = ""
    ts: float = 0.0  # seconds since the epoch
    override: bool = False  # it must speak even if denied (rooms that allow overrides)


@dataclass
class Stream:
    id: str
    created: float  # seconds since the epoch: the decision's window counts from here
    participants: tuple[str, ...]
    settings: Settings
    mentions: tuple[str, ...] = ()
    pressure: int = 0
    human: bool = False  # sent by a person (the operator, a mail sender), not a citizen
    thoughts: dict[str, Thought] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    granted: tuple[str, ...]
    denied: tuple[str, ...]
    silent: tuple[str, ...]
    slots: int
    exit: str  # clear_winner, all_slots_claimed, everyone_decided, window
    decided_at_ms: int  # after the stream opened
    fallback: bool = False  # nobody claimed a person's message: the most confident answers
    reasoning: str = ""  # who has the floor and why the others do not (§3.1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stream_id(message_id: str) -> str:
    """One stream per message: the same Message-ID always gives the same stream."""
    return "stream-" + hashlib.sha256(message_id.encode()).hexdigest()[:16]


def mentions(text: str, citizens: Iterable[str]) -> tuple[str, ...]:
    names = set(citizens)
    return tuple(dict.fromkeys(m for m in _MENTION.findall(text.lower()) if m in names))


def cap(s: Stream) -> int:
    """The most that may answer (§10.1): one under high pressure, the room's idle cap
    (three unless the room says otherwise) when nothing waits for the model."""
    if s.pressure > HIGH_PRESSURE:
        return 1
    if s.pressure == 0:
        return max(s.settings.max_responders, s.settings.idle_slots)
    return s.settings.max_responders


def min_confidence(s: Stream) -> float:
    """The room's minimum, raised to 0.7 under high pressure (§10.5) - not for work
    seeking volunteers, which is no generation to spare the model."""
    if s.pressure > HIGH_PRESSURE and not s.settings.fixed_slots:
        return max(s.settings.min_confidence, PRESSED_MIN_CONFIDENCE)
    return s.settings.min_confidence


def slots(s: Stream) -> int:
    """How many may answer: drawn from the weights with a seed from the stream id (so
    every daemon draws the same), within the cap."""
    if s.settings.fixed_slots > 0:
        return s.settings.fixed_slots
    # Not for secrecy: the same seed must give every daemon the same draw.
    rng = random.Random(int(s.id.removeprefix("stream-"), 16))  # noqa: S311
    draw, total, n = rng.random(), 0.0, len(s.settings.slot_weights)
    for k, weight in enumerate(s.settings.slot_weights, start=1):
        total += weight
        if draw < total:
            n = k
            break
    return max(1, min(n, cap(s)))


def confidence(s: Stream, t: Thought) -> float:
    """A bid's confidence with the moderator's boost."""
    boost = dict(s.settings.boosted).get(t.citizen, 0.0)
    return min(1.0, max(0.0, t.confidence + boost))


def _by_confidence(s: Stream, thoughts: Iterable[Thought]) -> list[Thought]:
    return sorted(thoughts, key=lambda t: (-confidence(s, t), t.citizen))


def _exit(s: Stream, thoughts: list[Thought], claims: list[Thought], n: int,
          elapsed_ms: int) -> str:
    """Why the decision can be made now ('' while it is worth waiting for more bids)."""
    early = s.settings.coordinate and not s.settings.require_unanimity
    if early and len(thoughts) == 1 and claims and confidence(s, claims[0]) > CLEAR_WINNER:
        return "clear_winner"
    if early and len(claims) >= n:
        return "all_slots_claimed"
    if len(thoughts) >= len(s.participants):
        return "everyone_decided"
    window = s.settings.intention_window_ms if s.settings.coordinate else UNCOORDINATED_WAIT_MS
    return "window" if elapsed_ms >= window else ""


def _granted(s: Stream, claims: list[Thought], n: int) -> list[str]:
    """The @mentioned claimers, then the most confident others above the minimum."""
    granted = [t.citizen for t in claims if t.citizen in s.mentions]  # @mention override
    bar = min_confidence(s)
    for t in claims:
        if len(granted) >= n + len(s.mentions):
            break
        if t.citizen in granted:
            continue
        top = sum(1 for g in granted if g not in s.mentions) < n
        if top and confidence(s, t) >= bar:
            granted.append(t.citizen)
    return granted


def _fallback(s: Stream, thoughts: list[Thought]) -> list[str]:
    """A person's message nobody claimed: the most confident voice answers anyway."""
    if not (s.human and s.settings.answer_humans):
        return []
    voices = _by_confidence(s, (t for t in thoughts if t.citizen not in s.settings.silenced))
    return [t.citizen for t in voices[:1]]


def _reasoning(s: Stream, granted: list[str], claims: list[Thought], n: int, *,
               fallback: bool, how: str) -> str:
    """The decision in words (§3.1 `Decision.reasoning`): who has the floor and why."""
    by = {t.citizen: t for t in s.thoughts.values()}
    parts = [f"{how}, {n} slot{'s' if n != 1 else ''}"]
    if granted:
        why = ("nobody claimed a person's message: the most confident answers" if fallback
               else "by confidence")
        parts.append("granted " + ", ".join(
            f"{c} ({confidence(s, by[c]):.2f}{', mentioned' if c in s.mentions else ''})"
            for c in granted) + f" - {why}")
    bar = min_confidence(s)
    for t in claims:
        if t.citizen not in granted:
            why = (f"below the minimum {bar:.2f}" if confidence(s, t) < bar
                   else "no slot left")
            parts.append(f"denied {t.citizen} ({confidence(s, t):.2f}: {why})")
    silenced = sorted(c for c in by if c in s.settings.silenced)
    if silenced:
        parts.append(f"silenced by the moderator: {', '.join(silenced)}")
    return "; ".join(parts)


def decide(s: Stream, now: float) -> Decision | None:
    """The decision at `now` (seconds since the epoch), or None while it is worth
    waiting for more thoughts (or the moderator paused the room)."""
    if s.settings.paused:
        return None
    thoughts = [t for c, t in sorted(s.thoughts.items()) if c in s.participants]
    claims = _by_confidence(s, (t for t in thoughts if t.claiming
                                and t.citizen not in s.settings.silenced))
    n = slots(s)
    elapsed_ms = int((now - s.created) * 1000)
    how = _exit(s, thoughts, claims, n, elapsed_ms)
    if not how:
        return None
    at = max(0, elapsed_ms)
    if not s.settings.coordinate:
        every = [t.citizen for t in claims]
        return Decision(tuple(every), (), tuple(
            t.citizen for t in thoughts if not t.claiming), len(claims), how, at,
            reasoning=f"{how}: no coordination, every claimer answers")
    granted = _granted(s, claims, n)
    fallback = not granted
    if fallback:
        granted = _fallback(s, thoughts)
        fallback = bool(granted)
    denied = tuple(t.citizen for t in claims if t.citizen not in granted)
    silent = tuple(t.citizen for t in thoughts if t.citizen not in granted and (
        not t.claiming or t.citizen in s.settings.silenced))
    return Decision(tuple(granted), denied, silent, n, how, at, fallback,
                    _reasoning(s, granted, claims, n, fallback=fallback, how=how))
