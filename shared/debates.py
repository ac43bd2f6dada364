"""Structured debates among citizens (`shared/debates/<id>/`): stages, legal moves,
steelman-before-challenge, the crux lock gate, falsifiers, a moderator, a crux.

    thread.json          topic, participants (2-5, with personas), budgets - by its starter
    moves/NNNN-<who>.json one accepted move each, written once by its author
    events.jsonl         the seed's event types, append-only (refusals included)
    crux.json, transcript.md   the crystallized result, once the debate has converged

The state of a debate is the replay of its moves through `Debate.apply`, a pure state
machine: every reader derives the same stage, turn, steelman grades, commitments and
crux. A move is checked against that state before it is written; an illegal one (wrong
stage, over budget, out of turn, a challenge before an accurate steelman, a vague
falsifier …) is refused with the reason, logged as an event, and never enters the thread.
The moderator is deterministic: its interventions are part of the replay.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from shared import records
from shared.atomic import CorruptFile, append_line, read_json, read_jsonl, write_bytes
from shared.errors import SharedError

log = logging.getLogger(__name__)

STAGES = ("DISCOVERY", "CRUX_LOCK", "EVIDENCE", "CONVERGED", "ENDED")
MOVES: dict[str, tuple[str, ...]] = {
    "DISCOVERY": ("CLAIM", "QUESTION", "PROPOSE_QUESTION", "TOP_CLAIM", "PASS"),
    "CRUX_LOCK": ("COMMIT", "STEELMAN", "GRADE_STEELMAN", "FALSIFIER", "TOP_CLAIM",
                  "PROPOSE_LOCK", "PASS"),
    "EVIDENCE": ("EVIDENCE", "CHALLENGE", "STEELMAN", "GRADE_STEELMAN", "CONCEDE",
                 "TOP_CLAIM", "PASS"),
}
ALL_MOVES = tuple(sorted({m for ms in MOVES.values() for m in ms}))
BUDGETS = {"DISCOVERY": (6, 10), "CRUX_LOCK": (6, 8), "EVIDENCE": (12, 16)}  # the seed's
SIDES = ("YES", "NO", "UNCERTAIN")
GRADES = ("ACCURATE", "INCOMPLETE", "WRONG")
MIN_PARTICIPANTS, MAX_PARTICIPANTS = 2, 5
VAGUE = ("probably", "likely", "unlikely", "significant", "significantly", "soon", "maybe",
         "might", "somewhat", "substantial", "substantially", "many", "few", "often",
         "considerably", "eventually", "perhaps", "roughly", "generally", "a lot")
_BINARY = re.compile(r"^(is|are|will|would|does|do|did|should|can|could|has|have|was|were)"
                     r"\b.*\?\s*$", re.IGNORECASE)
_DATE = re.compile(r"\b(19|20)\d\d(-\d\d(-\d\d)?)?\b")
_ID = re.compile(r"^debate-[0-9T]+-[0-9a-f]{4}$")
MODE = 0o664  # events and results are appended/rewritten by every participant


class DebateError(SharedError, ValueError):
    """A debate that cannot be started, or a step that is not allowed."""


class IllegalMove(DebateError):
    """A move refused by the rules; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def vague_words(text: str) -> list[str]:
    low = f" {text.lower()} "
    return [w for w in VAGUE if re.search(rf"\b{re.escape(w)}\b", low)]


def falsifier_problems(f: Mapping[str, Any] | None) -> list[str]:
    """Why a falsifier is not concrete (empty: it is): metric, threshold, deadline."""
    if not isinstance(f, Mapping):
        return ["no falsifier given"]
    problems = []
    metric, threshold, deadline = (str(f.get(k, "")).strip() for k in
                                   ("metric", "threshold", "deadline"))
    if len(metric.split()) < 2:
        problems.append("metric must name what is measured (at least two words)")
    if not re.search(r"\d", threshold):
        problems.append("threshold must be a number to compare with")
    if not _DATE.search(deadline):
        problems.append("deadline must be a date (YYYY, YYYY-MM or YYYY-MM-DD)")
    vague = vague_words(f"{metric} {threshold} {deadline}")
    if vague:
        problems.append(f"vague words: {', '.join(vague)}")
    return problems


def scaled_budgets(n: int, base: Mapping[str, tuple[int, int]] | None = None
                   ) -> dict[str, tuple[int, int]]:
    """The seed's budgets are for two participants; more participants get more messages
    (x n/2), so that each can still commit, steelman and be graded."""
    scale = max(1.0, n / 2)
    return {s: (math.ceil(lo * scale), math.ceil(hi * scale))
            for s, (lo, hi) in (base or BUDGETS).items()}


@dataclass
class Debate:
    """The replayed state of one debate."""

    id: str
    topic: str
    participants: list[str]
    budgets: dict[str, tuple[int, int]]
    stage: str = "DISCOVERY"
    seq: int = 0  # moves accepted so far
    stage_count: int = 0  # moves in the current stage
    question: str = ""
    commitments: dict[str, dict[str, Any]] = field(default_factory=dict)
    first_commitments: dict[str, dict[str, Any]] = field(default_factory=dict)
    falsifiers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    steelmans: list[dict[str, Any]] = field(default_factory=list)
    top_claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    first_top_claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    evidence_by: dict[str, int] = field(default_factory=dict)
    lock_attempts: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    turn: int = 0  # non-grade moves, for the round-robin
    ended: str = ""

    # ------------------------------------------------------------ reading

    @property
    def active(self) -> bool:
        return self.stage in MOVES

    def pending_steelman(self) -> dict[str, Any] | None:
        return next((s for s in self.steelmans if s["grade"] is None), None)

    def owed_by(self) -> str:
        """Whose move it is: the target of a pending steelman grades first; otherwise the
        participants take turns."""
        if not self.active:
            return ""
        pending = self.pending_steelman()
        if pending is not None:
            return str(pending["target"])
        return self.participants[self.turn % len(self.participants)]

    def accurate(self, author: str, target: str) -> bool:
        graded = [s for s in self.steelmans if s["author"] == author and s["target"] == target
                  and s["grade"] is not None]
        return bool(graded) and graded[-1]["grade"] == "ACCURATE"

    def allowed(self) -> tuple[str, ...]:
        """The moves the owed participant may make now."""
        if not self.active:
            return ()
        if self.pending_steelman() is not None:
            return ("GRADE_STEELMAN", "PASS")
        return tuple(m for m in MOVES[self.stage] if m != "GRADE_STEELMAN")

    def situation(self, me: str, recent: int = 12) -> dict[str, Any]:
        """What a participant sees before its move (the prompt's data; no other
        participant's private state exists)."""
        pending = self.pending_steelman()
        others = [p for p in self.participants if p != me]
        last_lock = self.lock_attempts[-1]["failed"] if self.lock_attempts else []
        moderator = [m["content"] for m in self.messages if m["author"] == "moderator"]
        return {
            "debate": self.id, "topic": self.topic, "question": self.question,
            "stage": self.stage, "you": me, "participants": self.participants,
            "allowed_moves": list(self.allowed()),
            "steelman_of_you_to_grade": ({"by": pending["author"],
                                          "steelman": pending["content"],
                                          "attempt": pending["attempt"]}
                                         if pending and pending["target"] == me else None),
            "your_commitment": self.commitments.get(me), "your_top_claim": self.top_claims.get(me),
            "your_falsifiers": self.falsifiers.get(me, []),
            "commitments": {p: c["side"] for p, c in self.commitments.items()},
            "you_may_challenge": [t for t in others if self.accurate(me, t)],
            "steelman_first": [t for t in others if not self.accurate(me, t)],
            "budget": {"used": self.stage_count, "min": self.budgets[self.stage][0],
                       "max": self.budgets[self.stage][1]} if self.active else None,
            "lock_failed_because": last_lock, "moderator": moderator[-1] if moderator else "",
            "recent_messages": [{k: m.get(k) for k in ("seq", "author", "move", "target",
                                                       "side", "content")}
                                for m in self.messages[-recent:]],
        }

    def lock_failures(self) -> list[str]:
        """The seed's four crux-lock criteria that do not hold (empty: lock)."""
        failed = []
        committed = [p for p, c in self.commitments.items() if c.get("side") in SIDES]
        if len(committed) < 2:
            failed.append("at least 2 participants must commit YES, NO or UNCERTAIN")
        sides = {self.commitments[p]["side"] for p in committed}
        if not {"YES", "NO"} <= sides:
            failed.append("both a YES and a NO commitment are needed (not all UNCERTAIN)")
        if not self.steelmans or any(s["grade"] != "ACCURATE" for s in self.steelmans
                                     if s["is_latest"]):
            failed.append("every steelman must be graded ACCURATE (and one must exist)")
        missing = [p for p in committed if not self.falsifiers.get(p)]
        if missing:
            failed.append(f"committed participants without a falsifier: {', '.join(missing)}")
        return failed

    # ------------------------------------------------------------ the rules

    def check(self, move: Mapping[str, Any]) -> None:  # noqa: PLR0912 - one per rule
        """Refuse an illegal move.

        :raises IllegalMove: with the reason.
        """
        kind, author = str(move.get("move", "")), str(move.get("author", ""))
        if not self.active:
            raise IllegalMove(f"the debate is {self.stage.lower()}: no more moves")
        if author not in self.participants:
            raise IllegalMove(f"{author} does not take part in this debate")
        if kind not in MOVES[self.stage]:
            raise IllegalMove(f"{kind} is not allowed in {self.stage} "
                              f"(allowed: {', '.join(MOVES[self.stage])})")
        if self.stage_count >= self.budgets[self.stage][1]:
            raise IllegalMove(f"{self.stage} has used its budget of "
                              f"{self.budgets[self.stage][1]} messages")
        owed = self.owed_by()
        if author != owed:
            raise IllegalMove(f"it is {owed}'s turn, not {author}'s")
        pending = self.pending_steelman()
        if pending is not None and kind not in ("GRADE_STEELMAN", "PASS"):
            raise IllegalMove(f"grade {pending['author']}'s steelman of you first")
        if kind == "GRADE_STEELMAN":
            if pending is None:
                raise IllegalMove("there is no steelman of you to grade")
            if move.get("grade") not in GRADES:
                raise IllegalMove(f"a grade is one of {', '.join(GRADES)}")
        target = str(move.get("target", ""))
        if kind in ("STEELMAN", "CHALLENGE") and (target == author
                                                   or target not in self.participants):
            raise IllegalMove(f"{kind} needs another participant as its target")
        if kind == "CHALLENGE" and not self.accurate(author, target):
            raise IllegalMove(f"{author} may challenge {target} only after a steelman of "
                              f"{target} graded ACCURATE")
        if kind in ("COMMIT", "CONCEDE") and move.get("side") not in SIDES:
            raise IllegalMove(f"{kind} needs a side: {', '.join(SIDES)}")
        if kind == "CONCEDE" and author not in self.commitments:
            raise IllegalMove("concede from a position: commit first")
        if kind == "FALSIFIER" or (kind == "COMMIT" and move.get("falsifier")):
            problems = falsifier_problems(move.get("falsifier"))
            if problems:
                raise IllegalMove("falsifier rejected: " + "; ".join(problems))
        if kind == "PROPOSE_QUESTION" and not str(move.get("question", "")).strip():
            raise IllegalMove("PROPOSE_QUESTION needs the question")
        if kind == "TOP_CLAIM":
            claim = move.get("top_claim") or {}
            if not str(claim.get("statement", "")).strip() or claim.get("side") not in (
                    "YES", "NO", "NUANCED"):
                raise IllegalMove("a TopClaim needs a statement and a side YES, NO or NUANCED")
        if not str(move.get("content", "")).strip() and kind not in ("PASS", "GRADE_STEELMAN"):
            raise IllegalMove(f"{kind} needs content")

    def apply(self, move: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Check a move and, if legal, take it; returns the events it caused."""
        self.check(move)
        before = len(self.events)
        self._take(dict(move))
        return self.events[before:]

    def _event(self, kind: str, **data: Any) -> None:
        self.events.append({"type": kind, "seq": self.seq, "stage": self.stage, **data})

    def _say(self, text: str) -> None:
        """A moderator intervention: part of the thread, derived, never a file."""
        self.messages.append({"seq": self.seq, "author": "moderator", "move": "MODERATOR",
                              "stage": self.stage, "content": text})
        self._event("moderator", content=text)

    def _take(self, move: dict[str, Any]) -> None:
        self.seq += 1
        self.stage_count += 1
        kind, author = move["move"], move["author"]
        msg: dict[str, Any] = {"seq": self.seq, "author": author, "move": kind, "stage": self.stage,
                               **{k: move[k] for k in (
                                   "content", "target", "side", "confidence", "grade",
                                   "question", "falsifier", "top_claim", "references")
                                  if k in move}}
        self.messages.append(msg)
        self._event("message_posted", author=author, move=kind,
                    content=str(move.get("content", ""))[:500])
        if kind != "GRADE_STEELMAN" and not (kind == "PASS" and self.pending_steelman()):
            self.turn += 1
        if kind == "STEELMAN":
            for s in self.steelmans:
                if s["author"] == author and s["target"] == move["target"]:
                    s["is_latest"] = False
            attempt = 1 + sum(1 for s in self.steelmans
                              if s["author"] == author and s["target"] == move["target"])
            self.steelmans.append({"seq": self.seq, "author": author, "target": move["target"],
                                   "content": move.get("content", ""), "grade": None,
                                   "attempt": attempt, "is_latest": True})
            self._event("steelman_attempt", author=author, target=move["target"],
                        attempt=attempt)
        elif kind in ("GRADE_STEELMAN", "PASS") and (
                graded := self.pending_steelman()) is not None:
            graded["grade"] = move.get("grade") if kind == "GRADE_STEELMAN" else "UNGRADED"
            self._event("steelman_graded", author=graded["author"], target=graded["target"],
                        grade=graded["grade"])
        elif kind in ("COMMIT", "CONCEDE"):
            commitment = {"side": move["side"], "confidence": _confidence(move),
                          "seq": self.seq}
            self.first_commitments.setdefault(author, commitment)
            self.commitments[author] = commitment
            self._event("commitment_made", author=author, side=move["side"],
                        confidence=commitment["confidence"], concession=kind == "CONCEDE")
            if move.get("falsifier"):
                self._falsifier(author, move["falsifier"])
        elif kind == "FALSIFIER":
            self._falsifier(author, move["falsifier"])
        elif kind == "TOP_CLAIM":
            claim = {**move["top_claim"], "seq": self.seq}
            self.first_top_claims.setdefault(author, claim)
            self.top_claims[author] = claim
        elif kind == "PROPOSE_QUESTION":
            self.question = str(move["question"]).strip()
        elif kind == "EVIDENCE":
            self.evidence_by[author] = self.evidence_by.get(author, 0) + 1
        self._advance(proposed_lock=kind == "PROPOSE_LOCK")

    def _falsifier(self, author: str, f: Mapping[str, Any]) -> None:
        entry = {k: str(f.get(k, "")) for k in ("metric", "threshold", "deadline", "reasoning")}
        entry["id"] = f"F{sum(len(v) for v in self.falsifiers.values()) + 1}"
        self.falsifiers.setdefault(author, []).append(entry)
        self._event("falsifier_declared", author=author, falsifier=entry)

    # ------------------------------------------------------------ gates and moderator

    def _advance(self, proposed_lock: bool = False) -> None:
        low, high = self.budgets[self.stage]
        n = len(self.participants)
        if self.stage == "DISCOVERY":
            binary = bool(_BINARY.match(self.question))
            if self.stage_count >= low and binary:
                self._to("CRUX_LOCK")
            elif self.stage_count >= high:
                self.question = self._binary_framing()
                self._say(f"Discovery has used its budget. The question is now: "
                          f"{self.question} Commit YES or NO, steelman each other, and "
                          "give one falsifier each (metric, threshold, deadline).")
                self._to("CRUX_LOCK")
        elif self.stage == "CRUX_LOCK":
            due = self.stage_count >= low and (proposed_lock or (self.stage_count - low) % n == 0)
            if self.pending_steelman() is None and (due or self.stage_count >= high):
                self._attempt_lock(final=self.stage_count >= high)
            elif self.stage_count >= high:
                self._attempt_lock(final=True)
        elif self.stage == "EVIDENCE":
            everyone = all(self.evidence_by.get(p) for p in self.participants)
            if (self.stage_count >= low and everyone) or self.stage_count >= high:
                self.ended = "" if everyone else "EVIDENCE used its budget"
                self._to("CONVERGED")
                self._event("debate_complete", reason=self.ended or "converged")

    def _attempt_lock(self, final: bool) -> None:
        while True:
            failed = self.lock_failures()
            attempt = len(self.lock_attempts) + 1
            self.lock_attempts.append({"seq": self.seq, "attempt": attempt, "failed": failed})
            self._event("lock_attempted", attempt=attempt)
            if not failed:
                self._event("lock_succeeded", attempt=attempt, question=self.question)
                self._to("EVIDENCE")
                return
            self._event("lock_failed", attempt=attempt, failed=failed)
            if attempt == 1:
                self._say("The crux does not lock yet: " + "; ".join(failed) + ". Commit "
                          "to YES or NO with a confidence, steelman someone who disagrees, "
                          "grade the steelmans of you honestly, and give a falsifier.")
            elif attempt == 2:
                self.question = self._binary_framing()
                self._say(f"Second failed lock. Binary framing: {self.question} Answer YES "
                          "or NO - UNCERTAIN does not lock.")
            else:
                derived = self._derive_falsifiers() if attempt == 3 else []
                if attempt == 3:
                    self._say("Third failed lock: the moderator derives falsifiers from the "
                              f"dialogue for {', '.join(derived) or 'nobody'}.")
                failed = self.lock_failures()
                if not failed:
                    self._event("lock_succeeded", attempt=attempt, question=self.question,
                                derived=derived)
                    self._to("EVIDENCE")
                elif final:
                    self.ended = "the crux would not lock: " + "; ".join(failed)
                    self._to("ENDED")
                    self._event("debate_complete", reason=self.ended)
                return
            if not final:
                return

    def _binary_framing(self) -> str:
        q = self.question.strip().rstrip("?") or self.topic.strip().rstrip(".?")
        return q + "?" if _BINARY.match(q + "?") else f"Is it true that {q}?"

    def _derive_falsifiers(self) -> list[str]:
        """For committed participants without one: a falsifier from their own words - the
        first number and date they used - validated like any other (it may still fail)."""
        derived = []
        for p, c in self.commitments.items():
            if self.falsifiers.get(p) or c.get("side") not in ("YES", "NO"):
                continue
            text = " ".join(str(m.get("content", "")) for m in self.messages
                            if m["author"] == p)
            number = re.search(r"[<>]=?\s*\d[\d.,%$]*|\d[\d.,%$]*", text)
            date = _DATE.search(text)
            f = {"metric": (self.question or self.topic)[:120],
                 "threshold": number.group(0) if number else "",
                 "deadline": date.group(0) if date else "",
                 "reasoning": "derived by the moderator from the dialogue"}
            if not falsifier_problems(f):
                self._falsifier(p, f)
                derived.append(p)
        return derived

    def _to(self, stage: str) -> None:
        self._event("stage_transition", **{"from": self.stage, "to": stage})
        self.stage, self.stage_count = stage, 0

    # ------------------------------------------------------------ the result

    def crux(self) -> dict[str, Any]:
        """The ThreadCrux: question, positions, falsifiers, counterfactual TopClaim
        linkage, resolution criteria, and whether it validates (failed checks listed)."""
        positions, counterfactual, cheap = {}, {}, []
        for p in self.participants:
            c = self.commitments.get(p, {})
            first = self.first_commitments.get(p, {})
            claim, first_claim = self.top_claims.get(p), self.first_top_claims.get(p)
            changed = bool(first) and first.get("side") != c.get("side")
            claim_changed = bool(claim and first_claim and (
                claim.get("side"), claim.get("statement")) != (first_claim.get("side"),
                                                             first_claim.get("statement")))
            positions[p] = {"side": c.get("side", "NONE"), "confidence": c.get("confidence"),
                            "top_claim": claim, "position_changed": changed,
                            "top_claim_changed": claim_changed}
            if changed and not claim_changed:
                cheap.append(p)
            linked = bool(claim) and c.get("side") in ("YES", "NO") and claim is not None \
                and claim.get("side") in ("YES", "NO")
            counterfactual[p] = {"top_claim_would_flip": linked,
                                 "why": "its TopClaim takes a side on the crux" if linked
                                 else "no TopClaim on a side, or no YES/NO commitment"}
        falsifiers = [{"by": p, **f} for p, fs in self.falsifiers.items() for f in fs]
        sides = {v["side"] for v in positions.values()}
        failed = []
        if not {"YES", "NO"} <= sides:
            failed.append("no real disagreement: needs both YES and NO")
        vague = [f["id"] for f in falsifiers if falsifier_problems(f)]
        if not falsifiers or vague:
            failed.append(f"falsifiers not concrete: {', '.join(vague) or 'none given'}")
        if sum(1 for v in counterfactual.values() if v["top_claim_would_flip"]) < 2:
            failed.append("not decision-relevant: fewer than 2 TopClaims would flip")
        criteria = [f"{f['metric']} {f['threshold']} by {f['deadline']} ({f['by']})"
                    for f in falsifiers if not falsifier_problems(f)]
        if not criteria:
            failed.append("no resolution criteria")
        if self.stage != "CONVERGED":
            failed.append(f"the debate did not converge ({self.stage.lower()}: {self.ended})")
        return {"id": self.id, "question": self.question, "positions": positions,
                "falsifiers": falsifiers, "counterfactual": counterfactual,
                "resolution_criteria": criteria, "cheap_concessions": cheap,
                "validated": not failed, "failed_checks": failed}

    def transcript(self) -> str:
        lines = [f"# Debate {self.id}: {self.topic}", "",
                 f"Participants: {', '.join(self.participants)}  ", f"Stage: {self.stage}  ",
                 f"Question: {self.question or '(none yet)'}", ""]
        stage = ""
        for m in self.messages:
            if m["stage"] != stage:
                stage = m["stage"]
                lines += ["", f"## {stage}", ""]
            extra = "".join(f" {k}={json.dumps(m[k], ensure_ascii=False)}" for k in
                            ("target", "side", "grade", "question", "falsifier") if k in m)
            lines.append(f"- **{m['author']}** `{m['move']}`{extra}: {m.get('content', '')}")
        return "\n".join(lines) + "\n"


def _confidence(move: Mapping[str, Any]) -> float:
    try:
        return min(1.0, max(0.0, float(move.get("confidence", 0.5))))
    except (TypeError, ValueError):
        return 0.5


class Debates:
    """Debate threads in the commons."""

    def __init__(self, shared_dir: Path, citizens: Iterable[str], enforce_identity: bool) -> None:
        self.shared = shared_dir
        self.dir = shared_dir / "debates"
        self.citizens = sorted(citizens)
        self.enforce = enforce_identity

    def ids(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(p.name for p in self.dir.iterdir() if _ID.match(p.name))

    def start(self, topic: str, participants: list[str], started_by: str, *,
              personas: Mapping[str, str] | None = None,
              budgets: Mapping[str, tuple[int, int]] | None = None,
              source: Mapping[str, Any] | None = None) -> Debate:
        people = list(dict.fromkeys(participants))
        if not topic.strip():
            raise DebateError("a debate needs a topic")
        if not MIN_PARTICIPANTS <= len(people) <= MAX_PARTICIPANTS:
            raise DebateError(f"a debate takes {MIN_PARTICIPANTS}-{MAX_PARTICIPANTS} "
                              f"participants, not {len(people)}")
        unknown = [p for p in people if p not in self.citizens]
        if unknown:
            raise DebateError(f"not citizens here: {', '.join(unknown)} "
                              f"(citizens: {', '.join(self.citizens)})")
        did = records.new_id("debate")
        plan = {s: tuple(v) for s, v in (budgets or scaled_budgets(len(people))).items()}
        for s, (lo, hi) in plan.items():
            if s not in BUDGETS or not 1 <= lo <= hi:
                raise DebateError(f"budget for {s} must be 1 <= min <= max, not {lo}-{hi}")
        body = {"id": did, "topic": topic[:1000], "participants": people,
                "personas": dict(personas or {}), "budgets": plan, "started_by": started_by,
                "source": dict(source or {}), "ts": time.time()}
        records.create(self.shared, self.dir / did / "thread.json", body)
        self._log(did, {"type": "debate_started", "seq": 0, "stage": "DISCOVERY",
                        "topic": topic[:300], "participants": people})
        return self.load(did)

    def thread(self, did: str) -> dict[str, Any]:
        path = self.dir / did / "thread.json"
        if not _ID.match(did) or not path.is_file():
            raise DebateError(f"no debate {did} - `citizen debates` lists them")
        data: dict[str, Any] = read_json(path)
        return data

    def moves(self, did: str) -> list[dict[str, Any]]:
        """The accepted move files in order (forged or broken ones skipped, logged)."""
        out = []
        folder = self.dir / did / "moves"
        for path in sorted(folder.glob("[0-9][0-9][0-9][0-9]-*.json")) if folder.is_dir() else ():
            author = path.stem.split("-", 1)[1]
            rec = records.read(path, author, self.enforce)
            if rec is None or rec.get("author") != author:
                log.warning("ignoring %s: not a move by %s", path, author)
                continue
            out.append(rec)
        return out

    def load(self, did: str) -> Debate:
        """Replay a debate; a move file that breaks the rules (written around `move`) is
        skipped, so what counts is always what the rules allow."""
        t = self.thread(did)
        d = Debate(did, t["topic"], list(t["participants"]),
                   {s: (int(v[0]), int(v[1])) for s, v in t["budgets"].items()})
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

        :raises IllegalMove: refused (the refusal is logged as an event too).
        """
        with FileLock(str(self.dir / did / ".lock"), mode=0o660):
            d = self.load(did)
            body = {k: v for k, v in move.items() if v not in (None, "", [], {})}
            body.update(author=author, seq=d.seq + 1, ts=time.time())
            try:
                d.apply(body)
            except IllegalMove as exc:
                self._log(did, {"type": "move_refused", "seq": d.seq, "stage": d.stage,
                                "author": author, "move": body.get("move"),
                                "reason": exc.reason})
                raise
            records.create(self.shared, self.dir / did / "moves" /
                           f"{body['seq']:04d}-{author}.json", body)
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
        append_line(self.dir / did / "events.jsonl", {"ts": time.time(), **event}, mode=MODE)

    def events(self, did: str) -> list[dict[str, Any]]:
        path = self.dir / did / "events.jsonl"
        return read_jsonl(path) if path.exists() else []

    def _crystallize(self, did: str, d: Debate) -> None:
        crux = d.crux()
        write_bytes(self.dir / did / "crux.json",
                    json.dumps(crux, ensure_ascii=False, indent=1).encode(), mode=MODE)
        write_bytes(self.dir / did / "transcript.md", d.transcript().encode(), mode=MODE)

    def result(self, did: str) -> dict[str, Any] | None:
        path = self.dir / did / "crux.json"
        try:
            data: dict[str, Any] = read_json(path)
        except (FileNotFoundError, CorruptFile):
            return None
        return data

    def owed(self, citizen: str) -> list[Debate]:
        out = []
        for did in self.ids():
            try:
                d = self.load(did)
            except (DebateError, CorruptFile) as exc:
                log.warning("debate %s: %s", did, exc)
                continue
            if d.owed_by() == citizen:
                out.append(d)
        return out
