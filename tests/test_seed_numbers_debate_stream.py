"""The debate plan's (001) and ThoughtStream's (002) numbers that no other test pinned by
value, each at its boundary on the real code path: the M1 stage case (a question at the
eighth message, the lock at the sixth), five participants at most, the CLI's $0.50,
the 6/6/12 budgets, two TopClaims that would flip, the 90 % lenient grader; strict's
0.7 and 3000 ms, balanced's 0.3 and 1000 ms, anarchic's 500 ms, the clear winner's
> 0.9, queue depth > 3, the temperature floor 0.01 and a bid's 0-1 confidence.
(The others: test_debate_defaults.py, test_stream_seeds.py, test_streams.py,
test_stream_floor.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest

from citizen.cli.debate import _budget, start
from shared.debates import BUDGETS, Debate, Debates
from shared.debates.grading import LENIENT, graders
from shared.debates.state import State
from shared.errors import Invalid
from shared.streams import (
    Settings,
    Stream,
    Streams,
    Thought,
    cooled,
    decide,
    slots,
    stream_id,
    warmed,
)
from tests.debating import FALSIFIER

FLIP = "top_claim_would_flip"
QUESTION = "Will writing tests first cut reverts below 5% by 2027?"
NAMES = ("opus", "mira", "aria", "zed", "nova")


# ------------------------------------------------------------ 001 the debate plan

def owed(d: Debate, move: dict[str, Any]) -> Debate:
    d.apply({"author": d.owed_by(), "content": "x", **move})
    return d


def test_m1_a_question_at_the_eighth_message_then_the_lock_at_the_sixth() -> None:
    """001 L129-130: after 8 messages with a binary question -> CRUX_LOCK; after 6 in
    CRUX_LOCK -> EVIDENCE (default budgets, two participants, the lock's first try)."""
    d = Debate("debate-1T1-0000", "Tests before features", ["a", "b"], dict(BUDGETS))
    for _ in range(7):
        owed(d, {"move": "CLAIM"})
    assert d.stage == "DISCOVERY" and d.stage_count == 7
    owed(d, {"move": "PROPOSE_QUESTION", "question": QUESTION})
    assert d.stage == "CRUX_LOCK" and d.question == QUESTION
    first = d.owed_by()
    other = "b" if first == "a" else "a"
    owed(d, {"move": "COMMIT", "side": "YES", "falsifier": FALSIFIER, FLIP: False})
    owed(d, {"move": "COMMIT", "side": "NO", "falsifier": FALSIFIER, FLIP: False})
    owed(d, {"move": "STEELMAN", "target": other})
    owed(d, {"move": "GRADE_STEELMAN", "grade": "ACCURATE"})
    owed(d, {"move": "STEELMAN", "target": first})
    assert d.stage == "CRUX_LOCK" and d.stage_count == 5
    assert not [e for e in d.events if e["type"] == "lock_attempted"]
    owed(d, {"move": "GRADE_STEELMAN", "grade": "ACCURATE"})
    assert d.stage == "EVIDENCE"
    tried = [e["type"] for e in d.events if e["type"].startswith("lock_")]
    assert tried == ["lock_attempted", "lock_succeeded"]


def test_a_debate_takes_at_most_five_participants(tmp_path: Path) -> None:
    """001 L385: scale to 3-5 agents - five may debate, a sixth is refused."""
    six = [*NAMES, "kai"]
    debates = Debates(tmp_path / "shared", six, enforce_identity=False)
    assert debates.start("Tests before features", list(NAMES), "operator").participants \
        == list(NAMES)
    with pytest.raises(Invalid, match="2-5 participants, not 6"):
        debates.start("Tests before features", six, "operator")


def test_the_cli_starts_a_debate_with_the_fifty_cent_target() -> None:
    """001 L236, L430: cost < $0.50 per debate - `citizen debate start --max-usd` defaults
    to 0.5, the one number `budget.max_usd_per_debate` holds."""
    (option,) = [p for p in start.params if p.name == "max_usd"]
    assert isinstance(option, click.Option) and option.default == 0.5


def test_the_operator_can_cut_the_budgets_to_6_6_12(tmp_path: Path) -> None:
    """001 L481: reduce message budgets (6/6/12 instead of 10/8/16) - `--budget` says it,
    and DISCOVERY then ends (framed) at its sixth message."""
    plan = _budget(("DISCOVERY=6-6", "CRUX_LOCK=6-6", "EVIDENCE=12-12"))
    assert plan == {"DISCOVERY": (6, 6), "CRUX_LOCK": (6, 6), "EVIDENCE": (12, 12)}
    debates = Debates(tmp_path / "shared", ["opus", "mira"], enforce_identity=False)
    d = debates.start("Tests before features", ["opus", "mira"], "operator", budgets=plan)
    for _ in range(5):
        d = debates.move(d.id, d.owed_by(), {"move": "CLAIM", "content": "x"})
    assert d.stage == "DISCOVERY"
    d = debates.move(d.id, d.owed_by(), {"move": "CLAIM", "content": "x"})
    assert d.stage == "CRUX_LOCK"


@pytest.mark.parametrize(("b_flips", "relevant"), [(True, True), (False, False)])
def test_a_crux_is_decision_relevant_when_two_topclaims_would_flip(
        b_flips: bool, relevant: bool) -> None:
    """001 L100, L263: authentic only if >= 2 agents' TopClaims would flip - two of two
    is enough, one is not."""
    d = Debate("debate-1T1-0000", "AI adoption", ["a", "b"],
               {"DISCOVERY": (1, 2), "CRUX_LOCK": (8, 20), "EVIDENCE": (2, 4)})
    owed(d, {"move": "PROPOSE_QUESTION", "question": "Will adoption pass 40%?"})
    sides = {"a": "YES", "b": "NO"}
    for _ in range(2):
        p = d.owed_by()
        owed(d, {"move": "TOP_CLAIM", "top_claim": {"statement": f"{p} is right",
                                                    "side": sides[p]}})
    for _ in range(2):
        p = d.owed_by()
        owed(d, {"move": "COMMIT", "side": sides[p], "falsifier": FALSIFIER,
                 FLIP: p == "a" or b_flips})
    for _ in range(2):
        p = d.owed_by()
        owed(d, {"move": "STEELMAN", "target": "b" if p == "a" else "a"})
        owed(d, {"move": "GRADE_STEELMAN", "grade": "ACCURATE"})
    assert d.stage == "EVIDENCE", d.lock_failures()
    failed = d.crux()["failed_checks"]
    assert any("not decision-relevant" in f for f in failed) is not relevant


def _graded(accurate: int, of: int) -> State:
    d = State("debate-1T1-0000", "t", ["a", "b"], dict(BUDGETS))
    d.steelmans = [{"author": "a", "target": "b",
                    "grade": "ACCURATE" if i < accurate else "INCOMPLETE"} for i in range(of)]
    return d


def test_a_grader_is_lenient_only_above_90_percent() -> None:
    """001 L477: if > 90 % ACCURATE, tighten grading - 91 of 100 is flagged, 90 of 100 not."""
    assert LENIENT == 0.9
    assert graders([_graded(91, 100)])["b"]["lenient"] is True
    assert graders([_graded(90, 100)])["b"]["lenient"] is False


# ------------------------------------------------------------ 002 ThoughtStream

def stream(preset: str, ts: list[tuple[str, bool, float]], *, msg: str = "m1",
           pressure: int = 0) -> Stream:
    """A citizen's message (no fallback answer) among NAMES, opened at t=100 s."""
    s = Stream(stream_id(msg), 100.0, NAMES, Settings.preset(preset), (), pressure)
    for name, claiming, conf in ts:
        s.thoughts[name] = Thought(name, claiming, conf)
    return s


def everyone(conf: float) -> list[tuple[str, bool, float]]:
    """opus claims at `conf`, everyone else defers: decided at once (everyone_decided)."""
    return [("opus", True, conf)] + [(n, False, 0.0) for n in NAMES[1:]]


@pytest.mark.parametrize(("preset", "bar", "below"), [("strict", 0.7, 0.69),
                                                      ("balanced", 0.3, 0.29)])
def test_a_rooms_minimum_confidence_is_the_seeds(preset: str, bar: float,
                                                 below: float) -> None:
    """002 L52 strict minConfidence 0.7, L62 balanced 0.3: a claim at the bar gets the
    floor, one just below it does not."""
    d = decide(stream(preset, everyone(bar)), 100.01)
    assert d is not None and d.exit == "everyone_decided" and d.granted == ("opus",)
    d = decide(stream(preset, everyone(below)), 100.01)
    assert d is not None and d.granted == () and d.denied == ("opus",)


@pytest.mark.parametrize(("preset", "window_s"), [("strict", 3.0), ("balanced", 1.0),
                                                  ("anarchic", 0.5)])
def test_a_rooms_intention_window_is_the_seeds(preset: str, window_s: float) -> None:
    """002 L53 strict 3000 ms, L63 balanced 1000 ms, L73 anarchic 500 ms: undecided a
    millisecond or two before the window closes, decided just after."""
    assert decide(stream(preset, []), 100.0 + window_s - 0.002) is None
    d = decide(stream(preset, []), 100.0 + window_s + 0.002)
    assert d is not None and d.exit == "window"


def test_a_clear_winner_is_one_bid_above_09() -> None:
    """002 L214-215: clearWinner = one thought, confidence > 0.9 (0.9 itself waits)."""
    assert slots(stream("balanced", [])) == 2  # one claim alone does not fill the slots
    assert decide(stream("balanced", [("opus", True, 0.9)]), 100.01) is None
    d = decide(stream("balanced", [("opus", True, 0.91)]), 100.01)
    assert d is not None and d.exit == "clear_winner" and d.granted == ("opus",)
    # not the only thought: no clear winner, however sure
    assert decide(stream("balanced", [("opus", True, 0.95), ("mira", False, 0.0)]),
                  100.01) is None


def test_a_queue_deeper_than_three_leaves_one_slot_and_a_07_minimum() -> None:
    """002 L1023-1024: queueDepth > 3 -> one responder (L1083: then minConfidence 0.7);
    a depth of 3 keeps the room's slots and minimum."""
    at3 = stream("balanced", everyone(0.65), pressure=3)
    at4 = stream("balanced", everyone(0.65), pressure=4)
    assert (slots(at3), slots(at4)) == (2, 1)
    assert decide(at3, 100.01).granted == ("opus",)  # type: ignore[union-attr]
    assert decide(at4, 100.01).granted == ()  # type: ignore[union-attr]


def test_a_room_never_cools_below_001() -> None:
    """002 L555, L593: TEMP_FLOOR 0.01 - rooms never fully cold; L606-607: 0.9 -> 0.855
    and 0.2 -> 0.19 in 10 s."""
    assert cooled(0.8, 0.0, 1_000_000.0) == 0.01
    assert warmed(0.1, "absent") == 0.01
    assert cooled(0.9, 0.0, 10.0) == pytest.approx(0.855)
    assert cooled(0.2, 0.0, 10.0) == pytest.approx(0.19)


def test_a_bids_confidence_is_kept_between_0_and_1(tmp_path: Path) -> None:
    """002 L248: Thought.confidence 0.0-1.0 - a bid above or below is kept at the bound."""
    streams = Streams(tmp_path, NAMES, enforce_identity=False)
    sid = streams.open("<bounds@example.org>", "Who knows file locks?").id
    streams.think(sid, "opus", True, 1.7, "sure")
    s = streams.think(sid, "mira", True, -0.3, "unsure")
    assert (s.thoughts["opus"].confidence, s.thoughts["mira"].confidence) == (1.0, 0.0)
