"""The replayed state of a structured debate, in memory: who committed, steelmanned,
was graded, declared a falsifier …, and what follows from that (whose move it is, which
moves are allowed, what a participant sees, why the crux would not lock). Pure; the
rules that change it are `rules.Debate`, a `State` that takes moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.debates.moves import MOVES, SIDES


@dataclass
class State:
    """The replayed state of one debate, and what can be read from it."""

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
    evidence_on: dict[str, list[int]] = field(default_factory=dict)  # falsifier id: seqs
    # Each participant's explicit answer to "would your TopClaim flip if the crux resolved
    # the other way?" (COMMIT's top_claim_would_flip), and the answers the lock recorded.
    flip_answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    counterfactual: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock_attempts: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    turn: int = 0  # non-grade moves, for the round-robin
    ended: str = ""
    # The seed's cost target per debate (< $0.50): fixed in the header at start; when the
    # moves' reported cost reaches it, the debate ends with that reason (0: none).
    usd_cap: float = 0.0
    usd: float = 0.0

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
        to_grade = pending if pending and pending["target"] == me else None
        return {
            "debate": self.id, "topic": self.topic, "question": self.question,
            "stage": self.stage, "you": me, "participants": self.participants,
            "allowed_moves": list(self.allowed()),
            "steelman_of_you_to_grade": to_grade and {"by": to_grade["author"],
                                                      "steelman": to_grade["content"],
                                                      "attempt": to_grade["attempt"]},
            "your_commitment": self.commitments.get(me), "your_top_claim": self.top_claims.get(me),
            "your_falsifiers": self.falsifiers.get(me, []),
            "falsifiers": {p: [f"{f['id']}: {f['metric']} {f['threshold']} by {f['deadline']}"
                               for f in fs] for p, fs in self.falsifiers.items()},
            "your_flip_answer": (self.flip_answers.get(me) or {}).get("answer"),
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
        unmet = self.unmet_steelmans()
        if unmet:
            failed.append("steelmans must be mutual - each side's steelman of the other "
                          "graded ACCURATE; none yet by: " + ", ".join(unmet))
        missing = [p for p in committed if not self.falsifiers.get(p)]
        if missing:
            failed.append(f"committed participants without a falsifier: {', '.join(missing)}")
        unasked = [p for p in self.sided() if p not in self.flip_answers]
        if unasked:
            failed.append("would your TopClaim flip if the crux resolved the other way? "
                          "Answer it (COMMIT with top_claim_would_flip true or false): "
                          + ", ".join(unasked))
        return failed

    def sided(self) -> dict[str, str]:
        """Who committed YES or NO, and which (in the participants' order)."""
        sides = {p: self.commitments.get(p, {}).get("side") for p in self.participants}
        return {p: str(side) for p, side in sides.items() if side in ("YES", "NO")}

    def unmet_steelmans(self) -> list[str]:
        """Who took a side without an ACCURATE steelman of someone on the other side (the
        seed's mutual steelmans: A->B and B->A for two; for more, each participant of
        each side has steelmanned the other side)."""
        sided = self.sided()
        return [p for p, side in sided.items()
                if not any(self.accurate(p, q) for q, other in sided.items() if other != side)]
