"""ThoughtStream coordination: who answers a message that reached several citizens.

    shared/streams/<id>/stream.json        the message, room, participants, mentions,
                                           governance settings, pressure at opening
    shared/streams/<id>/thoughts/<c>.json  each citizen's bid (claiming or deferring,
                                           confidence, reasoning), by its author only
    shared/streams/<id>/decision.json      the decision, written once by whoever
                                           computed it first
    shared/streams/<id>/responses/<c>.json what a granted citizen said
    shared/streams/<id>/records/<c>.json   the decision record: what the bidder saw

The decision is `decide()`, a pure function of the stream and the clock: slots drawn
70/25/5 from a seed derived from the message id, claims by confidence, the minimum
confidence, @mention override, and the seed's early exits. Any daemon can compute
it; all of them get the same answer, and the first writes it.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from shared import records
from shared.atomic import CorruptFile, read_json, write_json
from shared.errors import SharedError

PRESETS: dict[str, dict[str, Any]] = {  # the seed's governance levels (§0.2)
    "strict": {"max_responders": 1, "min_confidence": 0.7, "intention_window_ms": 3000},
    "balanced": {"max_responders": 2, "min_confidence": 0.3, "intention_window_ms": 1000},
    "anarchic": {"max_responders": 5, "min_confidence": 0.1, "intention_window_ms": 500},
}
# Rooms that differ from the balanced preset until a moderator sets them. Mail is not
# chat: its citizens fetch it over IMAP seconds apart, so its window is long, and one
# reply per mail is what a person expects (a moderator may allow more).
# Volunteers for work (a debate's participants) are asked by a citizen's wake that waits.
ROOM_DEFAULTS: dict[str, dict[str, Any]] = {
    "mail": {"intention_window_ms": 30_000, "max_responders": 1},
    "volunteers": {"intention_window_ms": 20_000},
}
SLOT_WEIGHTS = (0.70, 0.25, 0.05)  # 1, 2 or 3 slots (§2.3)
CLEAR_WINNER = 0.9
HIGH_PRESSURE = 3  # queue depth above which one slot only (§10.1)
# Without coordination every claimer answers: wait for every bid (or this long).
UNCOORDINATED_WAIT_MS = 60_000
_ID = re.compile(r"^stream-[0-9a-f]{16}$")
_MENTION = re.compile(r"@([a-z][a-z0-9_-]{1,31})")


class StreamError(SharedError, ValueError):
    """A stream that cannot be opened or a thought that is not allowed."""


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

    @classmethod
    def preset(cls, name: str, **changes: Any) -> Settings:
        if name not in PRESETS:
            raise StreamError(f"no preset '{name}' (presets: {', '.join(PRESETS)})")
        unknown = set(changes) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise StreamError(f"unknown room settings: {', '.join(sorted(unknown))}")
        return cls.from_dict({**PRESETS[name], **changes})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        return cls(int(data["max_responders"]), float(data["min_confidence"]),
                   int(data["intention_window_ms"]), tuple(data.get("slot_weights",
                                                                     SLOT_WEIGHTS)),
                   tuple(data.get("silenced", ())),
                   tuple((str(c), float(b)) for c, b in data.get("boosted", ())),
                   bool(data.get("coordinate", True)), bool(data.get("answer_humans", True)),
                   int(data.get("fixed_slots", 0)))


@dataclass(frozen=True)
class Thought:
    citizen: str
    claiming: bool
    confidence: float
    reasoning: str = ""
    ts: float = 0.0


@dataclass
class Stream:
    id: str
    created: float
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stream_id(message_id: str) -> str:
    """One stream per message: the same Message-ID always gives the same stream."""
    return "stream-" + hashlib.sha256(message_id.encode()).hexdigest()[:16]


def mentions(text: str, citizens: Iterable[str]) -> tuple[str, ...]:
    names = set(citizens)
    return tuple(dict.fromkeys(m for m in _MENTION.findall(text.lower()) if m in names))


def slots(s: Stream) -> int:
    """How many may answer: drawn from the weights with a seed from the stream id (so
    every daemon draws the same), capped by the room, one only under high pressure."""
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
    n = min(n, s.settings.max_responders)
    return 1 if s.pressure > HIGH_PRESSURE else max(1, n)


def _confidence(s: Stream, t: Thought) -> float:
    boost = dict(s.settings.boosted).get(t.citizen, 0.0)
    return min(1.0, max(0.0, t.confidence + boost))


def decide(s: Stream, now: float) -> Decision | None:
    """The decision, or None while it is worth waiting for more thoughts."""
    thoughts = [t for c, t in sorted(s.thoughts.items()) if c in s.participants]
    claims = sorted((t for t in thoughts if t.claiming and t.citizen not in s.settings.silenced),
                    key=lambda t: (-_confidence(s, t), t.citizen))
    n = slots(s)
    elapsed_ms = int((now - s.created) * 1000)
    if s.settings.coordinate and len(thoughts) == 1 and claims and \
            _confidence(s, claims[0]) > CLEAR_WINNER:
        how = "clear_winner"
    elif len(claims) >= n and s.settings.coordinate:
        how = "all_slots_claimed"
    elif len(thoughts) >= len(s.participants):
        how = "everyone_decided"
    elif elapsed_ms >= (s.settings.intention_window_ms if s.settings.coordinate
                        else UNCOORDINATED_WAIT_MS):
        how = "window"
    else:
        return None
    if not s.settings.coordinate:
        return Decision(tuple(t.citizen for t in claims), (), tuple(
            t.citizen for t in thoughts if not t.claiming), len(claims), how, max(0, elapsed_ms))
    granted = [t.citizen for t in claims if t.citizen in s.mentions]  # @mention override
    for t in claims:
        if len(granted) >= n + len(s.mentions):
            break
        if t.citizen in granted:
            continue
        top = sum(1 for g in granted if g not in s.mentions) < n
        if top and _confidence(s, t) >= s.settings.min_confidence:
            granted.append(t.citizen)
    fallback = False
    if not granted and s.human and s.settings.answer_humans:
        voices = sorted((t for t in thoughts if t.citizen not in s.settings.silenced),
                        key=lambda t: (-_confidence(s, t), t.citizen))
        granted, fallback = [t.citizen for t in voices[:1]], bool(voices)
    denied = tuple(t.citizen for t in claims if t.citizen not in granted)
    silent = tuple(t.citizen for t in thoughts if t.citizen not in granted and (
        not t.claiming or t.citizen in s.settings.silenced))
    return Decision(tuple(granted), denied, silent, n, how, max(0, elapsed_ms), fallback)


# ------------------------------------------------------------ room temperature (§8.3)

DECAY, DECAY_EVERY_S, FLOOR, START = 0.95, 10.0, 0.01, 0.5


def cooled(temperature: float, updated: float, now: float) -> float:
    """×0.95 for every whole 10 s without activity, never below the floor."""
    steps = max(0, int((now - updated) // DECAY_EVERY_S))
    return max(FLOOR, temperature * DECAY ** steps) if steps else temperature


def warmed(temperature: float, event: str) -> float:
    delta = {"human": 0.3, "serviced": -0.2, "present": 0.2, "absent": -0.4}[event]
    return max(FLOOR, min(1.0, temperature + delta))


def load_factor(mine: int, counts: Iterable[int]) -> float:
    """§10.4: favour the under-used. 1.0 at the average of recent answers, ±0.2 per
    average's worth above or below it, within [0.8, 1.2]."""
    values = list(counts)
    avg = sum(values) / len(values) if values else 0.0
    return min(1.2, max(0.8, 1.0 - 0.2 * (mine - avg) / max(avg, 1.0)))


def temperature_bias(temperature: float) -> float:
    """How the room's temperature moves a bid (§8.6): hot rooms +0.15, cold ones −0.1."""
    if temperature >= 0.7:
        return 0.15
    if temperature <= 0.3:
        return -0.1
    return 0.0


# ------------------------------------------------------------ the commons


class Streams:
    def __init__(self, shared_dir: Path, citizens: Iterable[str], enforce_identity: bool) -> None:
        self.shared = shared_dir
        self.dir = shared_dir / "streams"
        self.citizens = sorted(citizens)
        self.enforce = enforce_identity

    def semaphore(self, size: int = 1) -> Semaphore:
        """The shared model's admission control (`size`: generations it takes at once;
        any size reads the same queue depth, the ambient `pressure`)."""
        return Semaphore(self.dir / ".semaphore", size)

    # rooms -------------------------------------------------------------

    def _room_path(self, room: str) -> Path:
        if not re.fullmatch(r"[a-z0-9_-]{1,40}", room):
            raise StreamError(f"room names are 1-40 of a-z 0-9 _ - (not '{room}')")
        return self.dir / "rooms" / f"{room}.json"

    def room(self, room: str, now: float | None = None) -> dict[str, Any]:
        path = self._room_path(room)
        try:
            data: dict[str, Any] = read_json(path)
        except FileNotFoundError:
            data = {"preset": "balanced", "changes": dict(ROOM_DEFAULTS.get(room, {})),
                    "temperature": START,
                    "updated": time.time()}
        data["temperature_now"] = cooled(float(data["temperature"]), float(data["updated"]),
                                         time.time() if now is None else now)
        return data

    def settings(self, room: str) -> Settings:
        data = self.room(room)
        return Settings.preset(str(data["preset"]), **data.get("changes", {}))

    def set_room(self, room: str, preset: str | None = None, **changes: Any) -> dict[str, Any]:
        """The moderator's commands: a preset, thresholds, silence, boosts."""
        with self._room_lock(room):
            data = self.room(room)
            if preset is not None:
                Settings.preset(preset)  # a clear error for an unknown one
                data["preset"], data["changes"] = preset, dict(ROOM_DEFAULTS.get(room, {}))
            data["changes"] = {**data.get("changes", {}), **changes}
            Settings.preset(str(data["preset"]), **data["changes"])  # validates the mix
            self._save_room(room, data)
        return data

    def heat(self, room: str, event: str) -> float:
        """A temperature event (human, serviced, present, absent)."""
        with self._room_lock(room):
            data = self.room(room)
            data["temperature"] = warmed(float(data["temperature_now"]), event)
            data["updated"] = time.time()
            self._save_room(room, data)
        return float(data["temperature"])

    @contextmanager
    def _room_lock(self, room: str) -> Iterator[None]:
        path = self._room_path(room)
        records.make_dirs(path.parent, self.shared)
        with FileLock(str(path) + ".lock", mode=0o660):
            yield

    def _save_room(self, room: str, data: dict[str, Any]) -> None:
        data.pop("temperature_now", None)
        write_json(self._room_path(room), data, mode=0o664)  # any citizen heats the room

    # streams -----------------------------------------------------------

    def open(self, message_id: str, text: str, *, room: str = "general",
             participants: Iterable[str] | None = None, sender: str = "operator",
             pressure: int = 0, source: str = "say", fixed_slots: int = 0) -> Stream:
        """Open the stream of a message (or return the one another daemon opened).

        `source`: "say" (a broadcast: the granted answer in the stream) or "mail" (a mail
        each participant holds as a task: the granted take it up, the others file it)
        or "volunteer" (work seeking `fixed_slots` volunteers: the granted are they).
        """
        sid = stream_id(message_id)
        path = self.dir / sid / "stream.json"
        people = tuple(sorted(set(participants or self.citizens)))
        settings = self.settings(room)
        if fixed_slots:
            settings = replace(settings, fixed_slots=fixed_slots)
        body = {"id": sid, "message_id": message_id, "source": source,
                "text": text[:8000], "room": room,
                "sender": sender, "human": sender not in self.citizens,
                "participants": list(people),
                "mentions": list(mentions(text, people)), "settings": asdict(settings),
                "pressure": pressure, "created": time.time()}
        try:
            records.create(self.shared, path, body)
        except FileExistsError:
            return self.load(sid)
        return self.load(sid)

    def ids(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted((p.name for p in self.dir.iterdir() if _ID.match(p.name)),
                      key=lambda s: (self.dir / s).stat().st_mtime)

    def exists(self, sid: str) -> bool:
        return bool(_ID.match(sid)) and (self.dir / sid / "stream.json").is_file()

    def info(self, sid: str) -> dict[str, Any]:
        if not self.exists(sid):
            raise StreamError(f"no stream {sid} - `citizen decisions list` lists them")
        data: dict[str, Any] = read_json(self.dir / sid / "stream.json")
        return data

    def load(self, sid: str) -> Stream:
        info = self.info(sid)
        s = Stream(sid, float(info["created"]), tuple(info["participants"]),
                   Settings.from_dict(info["settings"]), tuple(info["mentions"]),
                   int(info["pressure"]), bool(info.get("human", False)))
        for c in s.participants:
            rec = self._read(sid, "thoughts", c)
            if rec is not None:
                s.thoughts[c] = Thought(c, bool(rec["claiming"]), float(rec["confidence"]),
                                        str(rec.get("reasoning", "")), float(rec["ts"]))
        return s

    def _read(self, sid: str, kind: str, citizen: str) -> dict[str, Any] | None:
        path = self.dir / sid / kind / f"{citizen}.json"
        return records.read(path, citizen, self.enforce) if path.is_file() else None

    def think(self, sid: str, citizen: str, claiming: bool, confidence: float,
              reasoning: str = "") -> Stream:
        """Write this citizen's bid (once; only its own - its file, its uid)."""
        s = self.load(sid)
        if citizen not in s.participants:
            raise StreamError(f"{citizen} is not addressed by {sid}")
        body = {"citizen": citizen, "claiming": claiming,
                "confidence": min(1.0, max(0.0, float(confidence))),
                "reasoning": reasoning[:1000], "ts": time.time()}
        try:
            records.create(self.shared, self.dir / sid / "thoughts" / f"{citizen}.json", body)
        except FileExistsError as exc:
            raise StreamError(f"{citizen} has already bid on {sid}") from exc
        return self.load(sid)

    def decision(self, sid: str) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = read_json(self.dir / sid / "decision.json")
        except (FileNotFoundError, CorruptFile):
            return None
        return data

    def try_decide(self, sid: str, by: str, now: float | None = None) -> dict[str, Any] | None:
        """The decision if it is made (by anyone), else compute it; the first writes it."""
        existing = self.decision(sid)
        if existing is not None:
            return existing
        d = decide(self.load(sid), time.time() if now is None else now)
        if d is None:
            return None
        body = {**d.to_dict(), "decided_by": by, "ts": time.time()}
        try:
            records.create(self.shared, self.dir / sid / "decision.json", body)
        except FileExistsError:
            return self.decision(sid)
        return body

    def wait_decision(self, sid: str, by: str, timeout_s: float = 10.0,
                      every_s: float = 0.02) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.try_decide(sid, by)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise StreamError(f"no decision on {sid} within {timeout_s} s")
            time.sleep(every_s)

    def respond(self, sid: str, citizen: str, text: str, **figures: Any) -> None:
        decision = self.decision(sid)
        if decision is None or citizen not in decision["granted"]:
            raise StreamError(f"{citizen} was not granted a response on {sid}")
        records.create(self.shared, self.dir / sid / "responses" / f"{citizen}.json",
                       {"citizen": citizen, "text": text, "ts": time.time(), **figures})

    def responses(self, sid: str) -> dict[str, dict[str, Any]]:
        out = {}
        for c in self.load(sid).participants:
            rec = self._read(sid, "responses", c)
            if rec is not None:
                out[c] = rec
        return out

    def answered(self, since: float, recent: int = 200) -> dict[str, int]:
        """How many answers each citizen gave since `since` (the newest streams)."""
        counts = dict.fromkeys(self.citizens, 0)
        for sid in self.ids()[-recent:]:
            folder = self.dir / sid / "responses"
            for path in folder.glob("*.json") if folder.is_dir() else ():
                if path.stem in counts and path.stat().st_mtime >= since:
                    counts[path.stem] += 1
        return counts

    def record(self, sid: str, citizen: str, body: Mapping[str, Any]) -> None:
        """The decision record of one bidder (what it saw, what it did)."""
        path = self.dir / sid / "records" / f"{citizen}.json"
        records.write(self.shared, path, {**body, "citizen": citizen})

    def read_record(self, sid: str, citizen: str) -> dict[str, Any] | None:
        return self._read(sid, "records", citizen)

    def rate(self, sid: str, citizen: str, score: float, by: str) -> None:
        """A post-hoc rating of a citizen's bid (0 = should have stayed silent, 1 = right
        to speak); the operator's file."""
        if not 0.0 <= score <= 1.0:
            raise StreamError("a rating is between 0 and 1")
        if self.read_record(sid, citizen) is None:
            raise StreamError(f"{citizen} has no decision record on {sid}")
        path = self.dir / sid / "ratings" / f"{citizen}.json"
        records.write(self.shared, path, {"citizen": citizen, "score": score, "by": by,
                                          "ts": time.time()})

    def calibration(self, citizen: str) -> dict[str, Any]:
        """How well a citizen's confidence predicted its ratings: factor = mean rating /
        mean confidence over rated bids, clamped to [0.5, 1.5] (1.0 until 3 ratings)."""
        pairs = []
        for sid in self.ids():
            rating = self.dir / sid / "ratings" / f"{citizen}.json"
            rec = self.read_record(sid, citizen)
            if rec is None or not rating.is_file():
                continue
            try:
                score = float(read_json(rating)["score"])
            except (CorruptFile, KeyError, ValueError):
                continue
            pairs.append((float(rec.get("confidence", 0.0)), score))
        if len(pairs) < 3:
            return {"citizen": citizen, "rated": len(pairs), "factor": 1.0}
        conf = sum(c for c, _ in pairs) / len(pairs)
        score = sum(r for _, r in pairs) / len(pairs)
        factor = 1.0 if conf == 0 else min(1.5, max(0.5, score / conf))
        brier = sum((c - r) ** 2 for c, r in pairs) / len(pairs)
        return {"citizen": citizen, "rated": len(pairs), "mean_confidence": round(conf, 3),
                "mean_rating": round(score, 3), "factor": round(factor, 3),
                "brier": round(brier, 4)}


# ------------------------------------------------------------ admission control (§10.4)


class Semaphore:
    """A cross-process counting semaphore over `size` lock files (flock: a holder that
    dies releases its slot). Waiters register a file each, so the queue depth - the
    ambient `pressure` - can be read by anyone."""

    def __init__(self, directory: Path, size: int) -> None:
        self.dir = directory
        self.size = max(1, size)
        self.held: FileLock | None = None

    def pressure(self) -> int:
        waiting = self.dir / "waiting"
        return sum(1 for _ in waiting.iterdir()) if waiting.is_dir() else 0

    def acquire(self, timeout_s: float = 60.0, every_s: float = 0.01) -> float:
        """Take a slot; returns seconds waited. :raises Timeout: none came free in time."""
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "waiting").mkdir(exist_ok=True)
        mark = self.dir / "waiting" / f"{os.getpid()}-{time.monotonic_ns()}"
        mark.touch()
        started = time.monotonic()
        try:
            while True:
                for k in range(self.size):
                    lock = FileLock(str(self.dir / f"slot-{k}.lock"), mode=0o660)
                    try:
                        lock.acquire(timeout=0)
                    except Timeout:
                        continue
                    self.held = lock
                    return time.monotonic() - started
                if time.monotonic() - started > timeout_s:
                    raise Timeout(str(self.dir))
                time.sleep(every_s)
        finally:
            mark.unlink(missing_ok=True)

    def release(self) -> None:
        if self.held is not None:
            self.held.release()
            self.held = None

    @contextmanager
    def slot(self, timeout_s: float = 60.0) -> Iterator[float]:
        waited = self.acquire(timeout_s)
        try:
            yield waited
        finally:
            self.release()
