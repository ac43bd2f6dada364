"""ThoughtStream threads in the commons (`shared/streams/<id>/`), through `shared.threads`.

    stream.json            the message, room, participants, mentions, governance
                           settings, pressure at opening - by whoever opened it first
    thoughts/<c>.json      each citizen's bid (claiming or deferring, confidence,
                           reasoning), written once by its author
    decision.json          the decision, written once by whoever computed it first
    responses/<c>.json     what a granted citizen said
    records/<c>.json       the decision record: what the bidder saw and did (rewritten
                           by it as its bid proceeds)
    ratings/<c>.json       a post-hoc rating of c's bid, by anyone but c (`ratings`)

Every record names its author under `author`; records written before that carry it
under `citizen` (a decision: `decided_by`) and are still read.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, cast

from shared import clock, records
from shared.errors import LockTimeout, NotAllowed, NotFound, SharedError
from shared.layout import Layout
from shared.streams.decision import (
    DecisionRecord,
    Settings,
    Stream,
    Thought,
    decide,
    mentions,
    stream_id,
)
from shared.streams.floor import floor, moderated, silenced_during
from shared.streams.ratings import Ratings
from shared.streams.rooms import Rooms
from shared.streams.semaphore import Semaphore
from shared.threads import Threads

log = logging.getLogger(__name__)

_ID = re.compile(r"^stream-[0-9a-f]{16}$")
# A bid written this close before a decision may not have been seen by its decider (it
# read the bids, then wrote): a decision may leave such bids out, and no older ones.
RACE_S = 2.0
OPENING_S = 2.0  # how long a stream another daemon is opening may take to show its header


class Streams:
    """ThoughtStream threads, rooms and the model's semaphore in the commons."""

    def __init__(self, shared_dir: Path, citizens: Iterable[str], enforce_identity: bool) -> None:
        # Stream ids are hashes of Message-IDs (one stream per message), not time-sortable.
        self.threads = Threads(Layout(shared_dir).streams, "stream", "stream.json",
                               top=shared_dir, enforce=enforce_identity, pattern=_ID,
                               what="stream", lister="citizen stream list")
        self.shared, self.dir = shared_dir, self.threads.root
        self.citizens, self.enforce = sorted(citizens), enforce_identity
        # Rooms and the semaphore make only their own directories (`streams/` is the
        # installer's, made with the commons' mode: see citizen.admin.founding.init_shared).
        self.rooms = Rooms(self.dir / "rooms", self.dir, enforce_identity)
        self.ratings = Ratings(self)

    def semaphore(self, size: int = 1) -> Semaphore:
        """The shared model's admission control (`size`: generations it takes at once;
        any size reads the same queue depth, the ambient `pressure`)."""
        return Semaphore(self.dir / ".semaphore", size, top=self.dir)

    # rooms -------------------------------------------------------------

    def room(self, room: str, now: float | None = None) -> dict[str, Any]:
        return self.rooms.room(room, now)

    def settings(self, room: str) -> Settings:
        return self.rooms.settings(room)

    def set_room(self, room: str, preset: str | None = None, **changes: Any) -> dict[str, Any]:
        """The moderator's commands: a preset, thresholds, silence, boosts."""
        return self.rooms.set(room, preset, **changes)

    def heat(self, room: str, event: str) -> float:
        """A temperature event (human, serviced, present, absent)."""
        return self.rooms.heat(room, event)

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
        people = tuple(sorted(set(participants or self.citizens)))
        settings = self.settings(room)
        if fixed_slots:
            settings = replace(settings, fixed_slots=fixed_slots)
        body = {"message_id": message_id, "source": source, "text": text[:8000], "room": room,
                "sender": sender, "human": sender not in self.citizens,
                "participants": list(people), "mentions": list(mentions(text, people)),
                "settings": asdict(settings), "pressure": pressure}
        if not self.threads.exists(sid):
            with suppress(NotAllowed, FileExistsError):  # another daemon opened it meanwhile
                self.threads.open(body, sid)
        deadline = time.monotonic() + OPENING_S
        while True:
            try:
                return self.load(sid)
            except NotFound:  # the other opener made the directory, not yet the header
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def ids(self) -> list[str]:
        """Every stream, the most recently changed last."""
        return sorted(self.threads.ids(), key=lambda s: self.threads.dir(s).stat().st_mtime)

    def exists(self, sid: str) -> bool:
        return self.threads.exists(sid)

    def info(self, sid: str) -> dict[str, Any]:
        """The stream's header. :raises NotFound: no such stream."""
        return self.threads.header(sid)

    def load(self, sid: str) -> Stream:
        info = self.info(sid)
        # `created`: the epoch float of records before the one timestamp format
        s = Stream(sid, clock.epoch(info.get("created", info.get("ts"))),
                   tuple(info["participants"]), Settings.from_dict(info["settings"]),
                   tuple(info["mentions"]), int(info["pressure"]), bool(info.get("human", False)))
        for c in s.participants:
            rec = self._read(sid, f"thoughts/{c}.json", c)
            if rec is not None:
                s.thoughts[c] = Thought(c, bool(rec["claiming"]), float(rec["confidence"]),
                                        str(rec.get("reasoning", "")), clock.epoch(rec.get("ts")),
                                        bool(rec.get("override", False)))
        return s

    def live(self, sid: str) -> Stream:
        """The stream under its room's moderation now (§0.3): a citizen silenced or a
        room paused after the stream opened holds for it too, not only for later ones."""
        s = self.load(sid)
        return moderated(s, self.settings(str(self.info(sid)["room"])))

    def floor(self, sid: str, citizen: str) -> str:
        """Why `citizen` may speak on `sid` now (granted, override, interruption), or ''
        (undecided, not granted, or the moderator silenced it or paused the room).
        Without coordination a claimer needs no decision (`floor`)."""
        decision = self.decision(sid)
        if decision is None and bool(self.info(sid)["settings"].get("coordinate", True)):
            return ""
        return floor(self.live(sid), decision or {}, citizen)

    def _read(self, sid: str, name: str, author: str | None, legacy: str = "citizen",
              accept: Callable[[dict[str, Any]], bool] | None = None
              ) -> dict[str, Any] | None:
        """A record through `Threads.read`; one written before the one author key names
        its author under `legacy` (a decision: `decided_by`)."""
        return self.threads.read(sid, name, author, accept=accept, legacy=(legacy,))

    def has(self, sid: str, kind: str, citizen: str) -> bool:
        """Whether `citizen` has a `kind` record (thoughts, responses) in the stream."""
        return (self.threads.dir(sid) / kind / f"{citizen}.json").exists()

    def waiting_for(self, citizen: str, recent: int = 50) -> list[str]:
        """The newest streams addressed to `citizen` where it has not bid, or bid and
        nothing decided them (its wait ended first: a pause, a kill - its wake decides
        them now, from the bids that arrived), or it was granted and has not answered."""
        out = []
        for sid in self.ids()[-recent:]:
            try:
                info = self.info(sid)
                room = self.settings(str(info["room"]))
            except (SharedError, OSError, ValueError):
                continue
            if citizen not in info["participants"]:
                continue
            if room.paused or citizen in room.silenced:  # the moderator's word, live
                continue
            if not self.has(sid, "thoughts", citizen):
                out.append(sid)
                continue
            if self.has(sid, "responses", citizen):
                continue  # it spoke: decided, and nothing more is owed by it
            decision = self.decision(sid)
            if decision is None or floor(self.live(sid), decision, citizen):
                out.append(sid)
        return out

    def think(self, sid: str, citizen: str, claiming: bool, confidence: float,
              reasoning: str = "", *, override: bool = False) -> Stream:
        """Write this citizen's bid (once; only its own - its file, its uid).

        :raises NotAllowed: not addressed to `citizen`, or it has bid already.
        """
        s = self.load(sid)
        if citizen not in s.participants:
            raise NotAllowed(f"{citizen} is not addressed by {sid}")
        name = f"thoughts/{citizen}.json"
        body = {"claiming": claiming, "confidence": min(1.0, max(0.0, float(confidence))),
                "reasoning": reasoning[:1000], "override": bool(override and claiming)}
        try:
            self.threads.write(sid, name, citizen, body)
        except NotAllowed as exc:
            if self._read(sid, name, citizen) is not None:
                raise NotAllowed(f"{citizen} has already bid on {sid}") from exc
            raise
        return self.load(sid)

    def decision(self, sid: str) -> DecisionRecord | None:
        """The stream's decision: the first daemon to compute it writes it, and every
        reader checks that the rules give it (`_sound`) - a bidder that writes a decision
        granting itself first gets nothing from it."""
        rec = self._read(sid, "decision.json", None, legacy="decided_by",
                         accept=lambda r: self._sound(sid, r))
        return cast(DecisionRecord, rec) if rec is not None else None

    def _sound(self, sid: str, rec: Mapping[str, Any]) -> bool:
        """In server mode: `rec` is what `decide` gives on the bids it says it considered,
        at the moment it says - and it left out no bid made well before it, and silenced
        only whom the room had silenced while the stream was open until it was written
        (a silence lifted since still counts; one never in force there does not)."""
        if not self.enforce:
            return True  # dev mode: one Unix user, every daemon is the same writer
        try:
            s = self.load(sid)
            considered = set(rec["considered"])
            written = clock.epoch(rec["ts"])
            at = (int(rec["decided_at_ms"]) + 0.5) / 1000
            granted = list(rec["granted"])
            used = set(rec.get("moderated", ()))
            history = self.rooms.silence_history(str(self.info(sid)["room"]))
        except (KeyError, TypeError, ValueError, SharedError):
            log.warning("ignoring the decision of %s: it does not say what it considered", sid)
            return False
        earlier = {c for c, t in s.thoughts.items() if t.ts < written - RACE_S}
        if not earlier <= considered or not considered <= set(s.thoughts):
            log.warning("ignoring the decision of %s: it leaves out bids made before it", sid)
            return False
        # RACE_S either side: the decider read the room between the two moments
        in_force = silenced_during(history, s.created - RACE_S, written + RACE_S)
        if not used <= {*s.settings.silenced, *in_force}:
            log.warning("ignoring the decision of %s: it silences whom nobody silenced", sid)
            return False
        s.thoughts = {c: t for c, t in s.thoughts.items() if c in considered}
        s.settings = replace(s.settings, silenced=tuple(sorted({*s.settings.silenced, *used})))
        d = decide(s, s.created + at)
        if d is None or list(d.granted) != granted:
            log.warning("ignoring the decision of %s: the rules do not give it", sid)
            return False
        return True

    def try_decide(self, sid: str, by: str, now: float | None = None) -> DecisionRecord | None:
        """The decision if it is made (by anyone), else compute it; the first writes it."""
        existing = self.decision(sid)
        if existing is not None:
            return existing
        s = self.live(sid)  # a citizen silenced since the stream opened gets no slot
        d = decide(s, clock.time() if now is None else now)
        if d is None:
            return None
        try:
            rec = self.threads.write(sid, "decision.json", by, {
                **d.to_dict(), "decided_by": by, "considered": sorted(s.thoughts),
                "moderated": list(s.settings.silenced)})
        except NotAllowed:  # another daemon wrote it first
            return self.decision(sid)
        return cast(DecisionRecord, rec)

    def wait_decision(self, sid: str, by: str, timeout_s: float = 10.0,
                      every_s: float = 0.02) -> DecisionRecord:
        """:raises LockTimeout: no decision within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.try_decide(sid, by)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise LockTimeout(f"no decision on {sid} within {timeout_s} s")
            time.sleep(every_s)

    def respond(self, sid: str, citizen: str, text: str, **figures: Any) -> None:
        """:raises NotAllowed: `citizen` does not have the floor (`floor`: not granted,
        no override or interruption its room allows, silenced, or the room paused), or
        has responded already."""
        why = self.floor(sid, citizen)
        if not why:
            raise NotAllowed(f"{citizen} does not have the floor on {sid} (not granted, or "
                             f"the moderator silenced it or paused the room)")
        self.threads.write(sid, f"responses/{citizen}.json", citizen,
                           {"text": text, "floor": why, **figures})

    def responses(self, sid: str) -> dict[str, dict[str, Any]]:
        out = {}
        for c in self.load(sid).participants:
            rec = self._read(sid, f"responses/{c}.json", c)
            if rec is not None:
                out[c] = rec
        return out

    def answered(self, since: float, recent: int = 200) -> dict[str, int]:
        """How many answers each citizen gave since `since` (the newest streams)."""
        counts = dict.fromkeys(self.citizens, 0)
        for sid in self.ids()[-recent:]:
            folder = self.threads.dir(sid) / "responses"
            for path in folder.glob("*.json") if folder.is_dir() else ():
                if path.stem in counts and path.stat().st_mtime >= since:
                    counts[path.stem] += 1
        return counts

    def activity(self, room: str, now: float, recent: int = 200) -> dict[str, Any]:
        """What a bidder in `room` sees of its recent activity (seed §9.2 ambient state):
        seconds since the room's last answer (None: none among the newest streams) and
        how many messages reached it in the last minute."""
        last, lately = None, 0
        for sid in self.ids()[-recent:]:
            try:
                info = self.info(sid)
            except SharedError:
                continue  # a stream being created right now, or a broken one
            if info.get("room") != room:
                continue
            if now - clock.epoch(info.get("created", info.get("ts"))) <= 60:
                lately += 1
            folder = self.threads.dir(sid) / "responses"
            for path in folder.glob("*.json") if folder.is_dir() else ():
                last = max(last or 0.0, path.stat().st_mtime)  # vs file mtimes: wall
        return {"time_since_last_response_s": None if last is None
                else round(max(0.0, time.time() - last), 1),
                "messages_in_last_minute": lately}

    def record(self, sid: str, citizen: str, body: Mapping[str, Any]) -> None:
        """The decision record of one bidder (what it saw, what it did). The one record
        of a stream that changes - its bidder rewrites it as its bid proceeds (failed
        answers are counted in it) - so it is replaced, not created once; it is read back
        through `Threads.read` like every other record (its file must be its author's)."""
        path = self.threads.dir(sid) / "records" / f"{citizen}.json"
        # records.write: the threads' modes, and beside a file pre-created in its name
        records.write(self.shared, path, citizen, {**body, "ts": clock.now()})

    def read_record(self, sid: str, citizen: str) -> dict[str, Any] | None:
        """The decision record of one bidder (None: it has none)."""
        return self._read(sid, f"records/{citizen}.json", citizen)

    def rate(self, sid: str, citizen: str, score: float, reasoning: str = "") -> None:
        """A post-hoc rating of `citizen`'s bid, by whoever runs this (`Ratings.rate`)."""
        self.ratings.rate(sid, citizen, score, reasoning)

    def calibration(self, citizen: str) -> dict[str, Any]:
        """How well `citizen`'s confidence predicted the ratings others gave it."""
        return self.ratings.calibration(citizen)
