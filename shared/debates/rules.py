"""The rules of a structured debate: a pure state machine over moves, in memory.

`Debate.apply(move)` checks a move against the replayed state (stage, budget, turn,
steelman-before-challenge, falsifier quality …) and takes it, or raises `IllegalMove`
with the reason. The moderator is deterministic - its prompts, binary framing and
derived falsifiers are consequences of the moves - so every reader replaying the same
moves derives the same stage, turn, grades, commitments and crux. No files here: the
store (`shared.debates.store`) reads and writes the moves.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from shared.debates.crux import crux, transcript
from shared.debates.moves import (
    BINARY,
    CHECKS,
    DATE,
    FLIP,
    KEPT,
    MOVES,
    IllegalMove,
    falsifier_problems,
)
from shared.debates.state import State

MAX_MOVE_USD = 5.0  # what one move may report: a turn is at most two calls


def _usd(move: Mapping[str, Any]) -> float:
    """What a move reports it cost (its author's meter; a malformed figure is 0)."""
    cost = move.get("cost")
    try:
        value = float(cost.get("usd", 0.0)) if isinstance(cost, Mapping) else 0.0
    except (TypeError, ValueError):
        return 0.0
    # NaN, negative: nothing; more than a wake may cost (a forged figure): that most.
    return min(value, MAX_MOVE_USD) if math.isfinite(value) and value > 0 else 0.0


def _confidence(move: Mapping[str, Any]) -> float:
    try:
        return min(1.0, max(0.0, float(move.get("confidence", 0.5))))
    except (TypeError, ValueError):
        return 0.5


class Debate(State):
    """One debate's state, and the rules that take a move into it."""

    def crux(self) -> dict[str, Any]:
        """The ThreadCrux (see `shared.debates.crux.crux`)."""
        return crux(self)

    def transcript(self) -> str:
        return transcript(self)

    # ------------------------------------------------------------ the rules

    def check(self, move: Mapping[str, Any]) -> None:
        """Refuse an illegal move.

        :raises IllegalMove: with the reason.
        """
        kind, author = str(move.get("move", "")), str(move.get("author", ""))
        reason = self._out_of_place(kind, author)
        for rule in CHECKS.get(kind, ()):
            reason = reason or rule(self, author, move)
        if not reason and not str(move.get("content", "")).strip() and kind not in (
                "PASS", "GRADE_STEELMAN"):
            reason = f"{kind} needs content"
        if reason:
            raise IllegalMove(reason)

    def _out_of_place(self, kind: str, author: str) -> str:  # noqa: PLR0911 - one per rule
        """Why no move of `kind` by `author` can be taken now, whatever it says."""
        if not self.active:
            return f"the debate is {self.stage.lower()}: no more moves"
        if author not in self.participants:
            return f"{author} does not take part in this debate"
        if kind not in MOVES[self.stage]:
            return (f"{kind} is not allowed in {self.stage} "
                    f"(allowed: {', '.join(MOVES[self.stage])})")
        if self.stage_count >= self.budgets[self.stage][1]:
            return f"{self.stage} has used its budget of {self.budgets[self.stage][1]} messages"
        owed = self.owed_by()
        if author != owed:
            return f"it is {owed}'s turn, not {author}'s"
        pending = self.pending_steelman()
        if pending is not None and kind not in ("GRADE_STEELMAN", "PASS"):
            return f"grade {pending['author']}'s steelman of you first"
        return ""

    def apply(self, move: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Check a move and, if legal, take it; returns the events it caused."""
        self.check(move)
        before = len(self.events)
        self._take(dict(move))
        if self.usd_cap and self.usd >= self.usd_cap and self.active:
            self.ended = (f"over its cost target: its moves cost ${self.usd:.2f} of the "
                          f"${self.usd_cap:.2f} it may (budget.max_usd_per_debate)")
            self._to("ENDED")
            self._event("debate_complete", reason=self.ended)
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
        self.usd += _usd(move)
        kind, author = move["move"], move["author"]
        self.messages.append({"seq": self.seq, "author": author, "move": kind,
                              "stage": self.stage, **{k: move[k] for k in KEPT if k in move}})
        self._event("message_posted", author=author, move=kind,
                    content=str(move.get("content", ""))[:500])
        if kind != "GRADE_STEELMAN" and not (kind == "PASS" and self.pending_steelman()):
            self.turn += 1
        if kind == "STEELMAN":
            self._steelman(author, move)
        elif kind in ("GRADE_STEELMAN", "PASS") and self.pending_steelman() is not None:
            self._grade(move)
        elif kind in ("COMMIT", "CONCEDE"):
            self._commit(author, move)
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
            self.evidence_on.setdefault(str(move["bears_on"]).strip(), []).append(self.seq)
        self._advance(proposed_lock=kind == "PROPOSE_LOCK")

    def _steelman(self, author: str, move: dict[str, Any]) -> None:
        mine = [s for s in self.steelmans if s["author"] == author
                and s["target"] == move["target"]]
        for s in mine:
            s["is_latest"] = False
        self.steelmans.append({"seq": self.seq, "author": author, "target": move["target"],
                               "content": move.get("content", ""), "grade": None,
                               "attempt": len(mine) + 1, "is_latest": True})
        self._event("steelman_attempt", author=author, target=move["target"],
                    attempt=len(mine) + 1)

    def _grade(self, move: dict[str, Any]) -> None:
        graded = self.pending_steelman()
        if graded is None:
            return
        graded["grade"] = move.get("grade") if move["move"] == "GRADE_STEELMAN" else "UNGRADED"
        self._event("steelman_graded", author=graded["author"], target=graded["target"],
                    grade=graded["grade"])

    def _commit(self, author: str, move: dict[str, Any]) -> None:
        commitment = {"side": move["side"], "confidence": _confidence(move), "seq": self.seq}
        self.first_commitments.setdefault(author, commitment)
        self.commitments[author] = commitment
        self._event("commitment_made", author=author, side=move["side"],
                    confidence=commitment["confidence"], concession=move["move"] == "CONCEDE")
        if move.get("falsifier"):
            self._falsifier(author, move["falsifier"])
        if isinstance(move.get(FLIP), bool):
            self.flip_answers[author] = {"answer": move[FLIP], "seq": self.seq}
        elif self.stage == "CRUX_LOCK" and move["side"] in ("YES", "NO") \
                and author not in self.flip_answers:
            self._say(f"{author}: would your TopClaim flip if the crux resolved the other "
                      f"way? Answer it: COMMIT again with {FLIP} true or false. The crux "
                      "does not lock without every side's answer.")

    def _falsifier(self, author: str, f: Mapping[str, Any]) -> None:
        entry = {k: str(f.get(k, "")) for k in ("metric", "threshold", "deadline", "reasoning")}
        entry["id"] = f"F{sum(len(v) for v in self.falsifiers.values()) + 1}"
        self.falsifiers.setdefault(author, []).append(entry)
        self._event("falsifier_declared", author=author, falsifier=entry)

    # ------------------------------------------------------------ gates and moderator

    def _advance(self, proposed_lock: bool = False) -> None:
        if self.stage == "DISCOVERY":
            self._discovery_gate()
        elif self.stage == "CRUX_LOCK":
            self._lock_gate(proposed_lock)
        elif self.stage == "EVIDENCE":
            low, high = self.budgets[self.stage]
            everyone = all(self.evidence_by.get(p) for p in self.participants)
            if (self.stage_count >= low and everyone) or self.stage_count >= high:
                self.ended = "" if everyone else "EVIDENCE used its budget"
                self._to("CONVERGED")
                self._event("debate_complete", reason=self.ended or "converged")

    def _discovery_gate(self) -> None:
        low, high = self.budgets[self.stage]
        if self.stage_count >= low and BINARY.match(self.question):
            self._to("CRUX_LOCK")
        elif self.stage_count >= high:
            self.question = self._binary_framing()
            self._say(f"Discovery has used its budget. The question is now: "
                      f"{self.question} Commit YES or NO, steelman each other, and "
                      "give one falsifier each (metric, threshold, deadline).")
            self._to("CRUX_LOCK")

    def _lock_gate(self, proposed_lock: bool) -> None:
        low, high = self.budgets[self.stage]
        n = len(self.participants)
        due = self.stage_count >= low and (proposed_lock or (self.stage_count - low) % n == 0)
        if self.pending_steelman() is None and (due or self.stage_count >= high):
            self._attempt_lock(final=self.stage_count >= high)
        elif self.stage_count >= high:
            self._attempt_lock(final=True)

    def _attempt_lock(self, final: bool) -> None:
        while True:
            failed = self.lock_failures()
            attempt = len(self.lock_attempts) + 1
            self.lock_attempts.append({"seq": self.seq, "attempt": attempt, "failed": failed})
            self._event("lock_attempted", attempt=attempt)
            if not failed:
                self._locked(attempt)
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
                self._last_resort(attempt, final)
                return
            if not final:
                return

    def _last_resort(self, attempt: int, final: bool) -> None:
        """Third and later failed locks: derive falsifiers (once), then lock or end."""
        derived = self._derive_falsifiers() if attempt == 3 else []
        if attempt == 3:
            self._say("Third failed lock: the moderator derives falsifiers from the "
                      f"dialogue for {', '.join(derived) or 'nobody'}.")
        failed = self.lock_failures()
        if not failed:
            self._locked(attempt, derived=derived)
        elif final:
            self.ended = "the crux would not lock: " + "; ".join(failed)
            self._to("ENDED")
            self._event("debate_complete", reason=self.ended)

    def _locked(self, attempt: int, **data: Any) -> None:
        """The crux locks: the counterfactual answers are recorded as they stand now, with
        the TopClaim each answer was about (the crux reports these, never an inference)."""
        self.counterfactual = {
            p: {**self.flip_answers[p], "side": side,
                "top_claim": (self.top_claims.get(p) or {}).get("statement", "")}
            for p, side in self.sided().items()}
        self._event("lock_succeeded", attempt=attempt, question=self.question,
                    would_flip={p: a["answer"] for p, a in self.counterfactual.items()},
                    **data)
        self._to("EVIDENCE")

    def _binary_framing(self) -> str:
        q = self.question.strip().rstrip("?") or self.topic.strip().rstrip(".?")
        return q + "?" if BINARY.match(q + "?") else f"Is it true that {q}?"

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
            date = DATE.search(text)
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
