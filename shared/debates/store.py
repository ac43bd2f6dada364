"""Debate threads in the commons (`shared/debates/<id>/`), through `shared.threads`.

    thread.json           topic, participants (2-5, with personas), budgets - by its starter
    moves/NNNN-<who>.json one accepted move each, written once by its author ("author")
    events.jsonl          the seed's event types, append-only (refusals included)
    crux.json, transcript.md   the crystallized result, once the debate has ended

On several servers (`remote`, `shared.remote`) the same names are keys the broker keeps:
the moves are records created once, each event a record of its own under `events/`,
the result one document (`crux.json`, holding the transcript too), and the one writer
at a time a lease instead of the folder's flock.

The state of a debate is the replay of its moves through the pure rules
(`shared.debates.rules.Debate`). A move is checked against that state before it is
written; an illegal one is refused with the reason, logged as an event, and never
enters the thread.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from shared import clock
from shared.atomic import (
    APPEND_WAIT_S,
    CorruptFile,
    append_line,
    read_json,
    read_jsonl,
    write_bytes,
)
from shared.debates import grading
from shared.debates.moves import (
    BUDGETS,
    MAX_PARTICIPANTS,
    MIN_PARTICIPANTS,
    IllegalMove,
    Move,
    budget_problem,
    measurement_problem,
    recorded,
    scaled_budgets,
)
from shared.debates.rules import Debate
from shared.errors import Invalid, NotFound
from shared.layout import Layout
from shared.locks import locked
from shared.remote import Remote
from shared.threads import Threads

log = logging.getLogger(__name__)

MODE = 0o664  # events and results are appended/rewritten by every participant
# A debate's events log: every participant appends to it (0664), so it is read to this
# cap from its end - a sparse giant planted there fills no reader. A debate has at most
# a few hundred moves of a few KB each.
EVENTS_TAIL = 8 * 2**20
MOVES_GLOB = "moves/[0-9][0-9][0-9][0-9]-*.json"
RESULT = "crux.json"  # written when a debate ends: its presence marks a finished debate


class Debates:
    """Debate threads in the commons."""

    def __init__(self, shared_dir: Path, citizens: Iterable[str], enforce_identity: bool,
                 remote: Remote | None = None) -> None:
        self.shared = shared_dir
        self.dir = Layout(shared_dir).debates
        self.citizens = sorted(citizens)
        self.enforce = enforce_identity
        self.remote = remote
        self.threads = Threads(self.dir, "debate", "thread.json", top=shared_dir,
                               enforce=enforce_identity, what="debate",
                               lister="citizen debate list", remote=remote)

    def _key(self, did: str, name: str) -> str:
        return self.threads.key(self.threads.dir(did) / name)

    @contextmanager
    def _one_writer(self, did: str) -> Iterator[None]:
        """One writer per debate at a time: the replay, the check and the write of move
        n+1 must see move n (flock: a killed writer's lock is released by the kernel; a
        lease: by the broker's clock). At most APPEND_WAIT_S: every participant can hold
        it, and one holding it for ever must not hang the others' moves - a LockTimeout
        names it."""
        if self.remote is not None:
            with self.remote.lease(self._key(did, "lock"), APPEND_WAIT_S):
                yield
            return
        with locked(self.threads.dir(did), lock_file=self.threads.dir(did) / ".lock",
                    timeout=APPEND_WAIT_S):
            yield

    def ids(self) -> list[str]:
        return self.threads.ids()

    def start(self, topic: str, participants: list[str], started_by: str, *,
              personas: Mapping[str, str] | None = None,
              budgets: Mapping[str, tuple[int, int]] | None = None,
              source: Mapping[str, Any] | None = None, usd_cap: float = 0.0) -> Debate:
        """Open a debate among `participants` (the first moves first).

        :raises Invalid: no topic or a measurement question, too few or many participants,
            a malformed budget.
        :raises NotFound: a participant who is no citizen here.
        """
        people = list(dict.fromkeys(participants))
        if not topic.strip():
            raise Invalid("a debate needs a topic")
        if measurement_problem(topic):
            raise Invalid(f"not a debate topic: {measurement_problem(topic)}")
        if not MIN_PARTICIPANTS <= len(people) <= MAX_PARTICIPANTS:
            raise Invalid(f"a debate takes {MIN_PARTICIPANTS}-{MAX_PARTICIPANTS} "
                          f"participants, not {len(people)}")
        unknown = [p for p in people if p not in self.citizens]
        if unknown:
            raise NotFound(f"not citizens here: {', '.join(unknown)} "
                           f"(citizens: {', '.join(self.citizens)})")
        if not (usd_cap >= 0 and math.isfinite(usd_cap)):
            raise Invalid(f"a debate's cost cap is a number of dollars >= 0, not {usd_cap}")
        plan = {s: tuple(v) for s, v in (budgets or scaled_budgets(len(people))).items()}
        problem = budget_problem(plan)
        if problem:
            raise Invalid(problem)
        did = self.threads.open({"topic": topic[:1000], "participants": people,
                                 "personas": dict(personas or {}), "budgets": plan,
                                 "started_by": started_by, "source": dict(source or {}),
                                 "usd_cap": float(usd_cap)})
        self._log(did, {"type": "debate_started", "seq": 0, "stage": "DISCOVERY",
                        "topic": topic[:300], "participants": people})
        return self.load(did)

    def thread(self, did: str) -> dict[str, Any]:
        """The debate's header. :raises NotFound: no such debate."""
        return self.threads.header(did)

    def moves(self, did: str) -> list[Move]:
        """The accepted move files in order (forged or broken ones skipped, logged)."""
        out = []
        for name in self.threads.names(did, MOVES_GLOB):
            author = Path(name).stem.split("-", 1)[1]
            rec = self.threads.read(did, name, author)
            if rec is not None:
                out.append(cast(Move, rec))
        return out

    def load(self, did: str) -> Debate:
        """Replay a debate; a move file that breaks the rules (written around `move`) is
        skipped, so what counts is always what the rules allow."""
        t = self.thread(did)
        d = Debate(did, t["topic"], list(t["participants"]),
                   {s: (int(v[0]), int(v[1])) for s, v in t["budgets"].items()},
                   usd_cap=float(t.get("usd_cap", 0.0)))
        for mv in self.moves(did):
            if int(mv.get("seq", 0)) != d.seq + 1:
                log.warning("debate %s: move %s out of sequence; skipped", did, mv.get("seq"))
                continue
            try:
                d.apply(mv)
            except IllegalMove as exc:
                log.warning("debate %s: move %s is illegal (%s); skipped", did, mv.get("seq"),
                            exc.reason)
        return d

    def move(self, did: str, author: str, move: Mapping[str, Any]) -> Debate:
        """Make a move: checked against the replayed state, written once, its events logged.

        :raises NotFound: no such debate.
        :raises IllegalMove: refused (the refusal is logged as an event too).
        """
        self.thread(did)  # a clear NotFound before any lock file is made
        with self._one_writer(did):
            d = self.load(did)
            body = recorded(move, author, d.seq + 1)
            try:
                d.apply(body)
            except IllegalMove as exc:
                self._log(did, {"type": "move_refused", "seq": d.seq, "stage": d.stage,
                                "author": author, "move": body.get("move"),
                                "reason": exc.reason})
                raise
            self.threads.write(did, f"moves/{body['seq']:04d}-{author}.json", author, body)
            self._catch_up(did, d)
            if not d.active:
                self._crystallize(did, d)
        return d

    def _catch_up(self, did: str, d: Debate) -> None:
        """Append the replay's events the log does not have yet (after a crash, too)."""
        logged = [e for e in self.events(did) if e["type"] not in ("move_refused",
                                                                    "debate_started")]
        for e in d.events[len(logged):]:
            self._log(did, e)

    def _log(self, did: str, event: dict[str, Any]) -> None:
        """Append an event; a log that refuses it (a FIFO or a link planted there) is
        logged and skipped: the moves are the record, the log only tells them."""
        if self.remote is not None:  # a record each: time-sortable, never colliding
            name = f"events/{clock.moment():%Y%m%dT%H%M%S%f}-{secrets.token_hex(4)}.json"
            # Wrapped: the record's "author" is the logger's, an event's is the mover's.
            self.remote.create(self._key(did, name), {"event": {"ts": clock.now(), **event}})
            return
        try:
            append_line(self.threads.dir(did) / "events.jsonl", {"ts": clock.now(), **event},
                        mode=MODE)
        except OSError as exc:
            log.warning("debate %s: event %s not logged (%s)", did, event.get("type"), exc)

    def events(self, did: str) -> list[dict[str, Any]]:
        """The debate's logged events, newest EVENTS_TAIL bytes (a line too deep or torn is
        skipped; a log that is no plain file - a link, a FIFO - is logged and read as none)."""
        if self.remote is not None:
            found = [r["data"].get("event") for r in self.remote.records(self._key(did,
                                                                                    "events"))]
            return [e for e in found if isinstance(e, dict) and "type" in e]
        path = self.threads.dir(did) / "events.jsonl"
        try:
            found = read_jsonl(path, tail_bytes=EVENTS_TAIL)
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("debate %s: %s is not read (%s) - move it aside", did, path, exc)
            return []
        return [e for e in found if isinstance(e, dict) and "type" in e]

    def _crystallize(self, did: str, d: Debate) -> None:
        if self.remote is not None:  # derived from the moves: whoever ends it writes it
            self.remote.update(self._key(did, RESULT), dict, lambda doc: doc.update(
                {"crux": d.crux(), "transcript": d.transcript()}))
            return
        folder = self.threads.dir(did)
        # The plan's output format, {"crux": {...}} (templates/schemas/debate_crux.json).
        write_bytes(folder / RESULT, json.dumps({"crux": d.crux()}, ensure_ascii=False,
                                                indent=1).encode(), mode=MODE)
        write_bytes(folder / "transcript.md", d.transcript().encode(), mode=MODE)

    def result(self, did: str) -> dict[str, Any] | None:
        """The crux of an ended debate (None while it runs, or if unreadable)."""
        try:
            data = (self.remote.document(self._key(did, RESULT), dict)[0] or None
                    if self.remote is not None else read_json(self.threads.dir(did) / RESULT))
        except (FileNotFoundError, CorruptFile):
            return None
        crux = data.get("crux", data) if isinstance(data, dict) else None  # flat: before
        return crux if isinstance(crux, dict) else None

    def transcript(self, did: str) -> str:
        """The Markdown transcript of an ended debate ('' while it runs)."""
        if self.remote is not None:
            return str(self.remote.document(self._key(did, RESULT), dict)[0].get(
                "transcript", ""))
        try:
            return (self.threads.dir(did) / "transcript.md").read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def graders(self) -> dict[str, dict[str, Any]]:
        """Each grader's record over every debate here, lenient ones flagged
        (`shared.debates.grading`)."""
        return grading.graders(self.load(did) for did in self.ids())

    def owed(self, citizen: str) -> list[Debate]:
        """The debates whose next move is `citizen`'s. A finished debate (its crux is
        written) is not replayed; the others are replayed only when a record changed."""
        loaded: dict[str, Debate] = {}

        def owed_by(did: str) -> str:
            loaded[did] = self.load(did)
            return loaded[did].owed_by()

        running = [did for did in self.ids() if not self._ended(did)]
        return [loaded.get(did) or self.load(did)
                for did in self.threads.owed(citizen, running, owed_by)]

    def _ended(self, did: str) -> bool:
        if self.remote is not None:
            return self.result(did) is not None
        return (self.threads.dir(did) / RESULT).is_file()


__all__ = ["BUDGETS", "Debates"]
