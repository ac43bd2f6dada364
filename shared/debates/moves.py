"""What a debate move is: the stages and their moves, sides, grades and budgets, the
record a move becomes, and the checks of a move's own content (a target, a side, a
concrete falsifier: `falsifier_problems`). Pure, and it imports no other module of the
debates: the replayed state is `state`, the state machine that applies moves `rules`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypedDict

from shared.errors import NotAllowed

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
BINARY = re.compile(r"^(is|are|will|would|does|do|did|should|can|could|has|have|was|were)"
                     r"\b.*\?\s*$", re.IGNORECASE)
FLIP = "top_claim_would_flip"  # COMMIT's answer to the seed's counterfactual question
KEPT = ("content", "target", "side", "confidence", "grade", "question", "falsifier",
         "top_claim", FLIP, "bears_on", "references")  # what of a move enters the thread

VAGUE = ("probably", "likely", "unlikely", "significant", "significantly", "soon", "maybe",
         "might", "somewhat", "substantial", "substantially", "many", "few", "often",
         "considerably", "eventually", "perhaps", "roughly", "generally", "a lot")
DATE = re.compile(r"\b(19|20)\d\d(-\d\d(-\d\d)?)?\b")
_VAGUE = tuple((w, re.compile(rf"\b{re.escape(w)}\b")) for w in VAGUE)


def vague_words(text: str) -> list[str]:
    low = f" {text.lower()} "
    return [w for w, pattern in _VAGUE if pattern.search(low)]


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
    if not DATE.search(deadline):
        problems.append("deadline must be a date (YYYY, YYYY-MM or YYYY-MM-DD)")
    vague = vague_words(f"{metric} {threshold} {deadline}")
    if vague:
        problems.append(f"vague words: {', '.join(vague)}")
    return problems


# The seed: "No measurement questions (validator checks)". A crux is a binary question
# two sides can take; "how much is X" has an answer, not sides.
_MEASUREMENT = re.compile(
    r"\bhow (much|many|long|big|large|high|low|far|fast|often|old)\b"
    r"|\bwhat (is|are|was|were|will be|would be) (the )?(value|amount|number|size|price|"
    r"cost|level|rate|percentage|share|count|probability|chance)s? of\b"
    r"|\bwhat (percentage|fraction|proportion|share|amount|number)\b"
    r"|\bto what (extent|degree)\b", re.IGNORECASE)


def measurement_problem(text: str) -> str:
    """Why `text` (a topic or a crux question) asks for a measurement ('' if it does not)."""
    found = _MEASUREMENT.search(text)
    if not found:
        return ""
    return (f"'{found.group(0)} ...' asks for a measurement, which has an answer, not sides: "
            "ask a yes/no question with a threshold instead, e.g. 'Will the share of "
            "reverted merges fall below 5% by 2027?'")


class Falsifier(TypedDict, total=False):
    metric: str
    threshold: str
    deadline: str
    reasoning: str


class Move(TypedDict, total=False):
    """One move as its author writes it (`moves/NNNN-<author>.json`)."""

    move: str  # one of ALL_MOVES
    author: str
    seq: int  # its place in the thread, from 1
    content: str
    target: str  # STEELMAN, CHALLENGE
    side: str  # COMMIT, CONCEDE: one of SIDES
    confidence: float
    grade: str  # GRADE_STEELMAN: one of GRADES
    question: str  # PROPOSE_QUESTION
    falsifier: Falsifier  # FALSIFIER, COMMIT
    top_claim: dict[str, Any]  # TOP_CLAIM: statement, side YES/NO/NUANCED
    top_claim_would_flip: bool  # COMMIT: would my TopClaim flip if the crux went the other way
    bears_on: str  # EVIDENCE: the id of the falsifier it bears on (F1, F2 ...)
    references: list[str]
    cost: dict[str, Any]  # calls, usd, tokens the move took
    ts: str  # when it was recorded (clock.now())


class IllegalMove(NotAllowed):
    """A move refused by the rules; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def scaled_budgets(n: int, base: Mapping[str, tuple[int, int]] | None = None
                   ) -> dict[str, tuple[int, int]]:
    """The seed's budgets are for two participants; more participants get more messages
    (x n/2), so that each can still commit, steelman and be graded."""
    scale = max(1.0, n / 2)
    return {s: (math.ceil(lo * scale), math.ceil(hi * scale))
            for s, (lo, hi) in (base or BUDGETS).items()}


def recorded(move: Mapping[str, Any], author: str, seq: int) -> dict[str, Any]:
    """What of a proposed move is recorded: empty fields dropped, its author and place set."""
    body = {k: v for k, v in move.items() if v not in (None, "", [], {})}
    return {**body, "author": author, "seq": seq}


def budget_problem(budgets: Mapping[str, tuple[int, ...]]) -> str:
    """Why a budget plan is malformed ('' when it is not)."""
    for s, (lo, hi) in budgets.items():
        if s not in BUDGETS or not 1 <= lo <= hi:
            return f"budget for {s} must be 1 <= min <= max, not {lo}-{hi}"
    return ""


# ------------------------------------------------------------ per-move checks

class Reading(Protocol):
    """What a per-move check reads of the replayed state (`state.State` is one)."""

    participants: list[str]
    commitments: dict[str, dict[str, Any]]
    falsifiers: dict[str, list[dict[str, Any]]]
    top_claims: dict[str, dict[str, Any]]

    def pending_steelman(self) -> dict[str, Any] | None: ...

    def accurate(self, author: str, target: str) -> bool: ...


Check = Callable[[Reading, str, Mapping[str, Any]], str]


def _needs_pending(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    return "there is no steelman of you to grade" if d.pending_steelman() is None else ""


def _needs_grade(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    return "" if move.get("grade") in GRADES else f"a grade is one of {', '.join(GRADES)}"


def _needs_target(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    target = str(move.get("target", ""))
    if target == author or target not in d.participants:
        return f"{move.get('move')} needs another participant as its target"
    return ""


def _needs_accurate_steelman(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    target = str(move.get("target", ""))
    if d.accurate(author, target):
        return ""
    return f"{author} may challenge {target} only after a steelman of {target} graded ACCURATE"


def _needs_side(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    return "" if move.get("side") in SIDES else \
        f"{move.get('move')} needs a side: {', '.join(SIDES)}"


def _needs_commitment(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    return "" if author in d.commitments else "concede from a position: commit first"


def _concrete_falsifier(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    if move.get("move") == "COMMIT" and not move.get("falsifier"):
        return ""  # a commitment may come without one (the lock gate asks for it)
    problems = falsifier_problems(move.get("falsifier"))
    return "falsifier rejected: " + "; ".join(problems) if problems else ""


def _flip_answer(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    """The counterfactual question is answered explicitly (true or false), and "my TopClaim
    would flip" needs a TopClaim to flip."""
    if FLIP not in move:
        return ""  # a commitment may come without it (the lock gate asks for it)
    if not isinstance(move[FLIP], bool):
        return f"{FLIP} answers true or false: would your TopClaim flip if the crux " \
            "resolved the other way?"
    if move[FLIP] and author not in d.top_claims:
        return f"{FLIP}: true needs a TopClaim to flip - declare it first (TOP_CLAIM)"
    return ""


def _names_falsifier(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    """The seed: evidence is "data tied to falsifiers" - it names the one it bears on."""
    ids = [f["id"] for fs in d.falsifiers.values() for f in fs]
    named = str(move.get("bears_on", "")).strip()
    if named in ids:
        return ""
    return ("EVIDENCE must name the falsifier it bears on in bears_on "
            f"({'one of ' + ', '.join(ids) if ids else 'none is declared yet'}"
            f"{'' if not named else '; ' + repr(named) + ' is none of them'})")


def _needs_question(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    question = str(move.get("question", "")).strip()
    if not question:
        return "PROPOSE_QUESTION needs the question"
    return measurement_problem(question)


def _needs_top_claim(d: Reading, author: str, move: Mapping[str, Any]) -> str:
    claim = move.get("top_claim") or {}
    if not (str(claim.get("statement", "")).strip()
            and claim.get("side") in ("YES", "NO", "NUANCED")):
        return "a TopClaim needs a statement and a side YES, NO or NUANCED"
    confidence = claim.get("confidence", 0.5)
    # The plan's TopClaim: `confidence: number // 0-1` (bool is no number here).
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) \
            or not 0 <= confidence <= 1:
        return f"a TopClaim's confidence is a number from 0 to 1, not {confidence!r}"
    return ""


CHECKS: dict[str, tuple[Check, ...]] = {  # in the order their reasons are given
    "GRADE_STEELMAN": (_needs_pending, _needs_grade),
    "STEELMAN": (_needs_target,),
    "CHALLENGE": (_needs_target, _needs_accurate_steelman),
    "COMMIT": (_needs_side, _concrete_falsifier, _flip_answer),
    "EVIDENCE": (_names_falsifier,),
    "CONCEDE": (_needs_side, _needs_commitment),
    "FALSIFIER": (_concrete_falsifier,),
    "PROPOSE_QUESTION": (_needs_question,),
    "TOP_CLAIM": (_needs_top_claim,),
}
