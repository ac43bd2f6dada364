"""Structured debates: stages, legal moves, steelmans, the lock gate, the moderator,
falsifiers and the crystallized crux - the rules, whatever the participants say."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.debates import (
    Debate,
    Debates,
    IllegalMove,
    falsifier_problems,
    scaled_budgets,
)
from shared.debates.moves import FLIP
from tests.debating import FALSIFIER, play

PEOPLE = ["opus", "mira", "aria"]
MUTUAL = "steelmans must be mutual - each side's steelman of the other graded ACCURATE; " \
    "none yet by: "


@pytest.fixture
def debates(tmp_path: Path) -> Debates:
    return Debates(tmp_path / "shared", PEOPLE, enforce_identity=False)


def run_out(debates: Debates, did: str, limit: int = 300) -> Debate:
    d = debates.load(did)
    for _ in range(limit):
        if not d.active:
            return d
        who = d.owed_by()
        d = debates.move(did, who, play(d.situation(who)))
    raise AssertionError("the debate did not end")


@pytest.mark.parametrize(("falsifier", "problem"), [
    (FALSIFIER, None),
    ({"metric": "Reverts", "threshold": "< 5%", "deadline": "2027"}, "at least two words"),
    ({"metric": "Share of reverts", "threshold": "low", "deadline": "2027"}, "a number"),
    ({"metric": "Share of reverts", "threshold": "< 5%", "deadline": "soon"}, "a date"),
    ({"metric": "Probably the share of reverts", "threshold": "5%", "deadline": "2027-01"},
     "vague words: probably"),
    ({"metric": "Share of reverts", "threshold": "a significant 5%", "deadline": "2027"},
     "vague words: significant"),
    (None, "no falsifier"),
])
def test_falsifiers_must_be_concrete(falsifier: Any, problem: str | None) -> None:
    found = falsifier_problems(falsifier)
    assert (not found) if problem is None else any(problem in p for p in found)


def test_budgets_scale_with_participants() -> None:
    assert scaled_budgets(2)["DISCOVERY"] == (6, 10)
    assert scaled_budgets(3)["EVIDENCE"] == (18, 24)
    assert scaled_budgets(5)["CRUX_LOCK"] == (15, 20)


def test_three_participants_reach_a_validated_crux(debates: Debates) -> None:
    d = debates.start("Tests before features", PEOPLE, "operator")
    d = run_out(debates, d.id)
    assert d.stage == "CONVERGED" and not d.ended
    crux = debates.result(d.id)
    assert crux is not None and crux["validated"], crux and crux["failed_checks"]
    assert {p["side"] for p in crux["positions"].values()} == {"YES", "NO"}
    assert crux["resolution_criteria"] and crux["cheap_concessions"] == []
    # the steelman intervention path: opus's first steelman INCOMPLETE, its retry ACCURATE
    opus = [s for s in d.steelmans if s["author"] == "opus"]
    assert [s["grade"] for s in opus][:2] == ["INCOMPLETE", "ACCURATE"]
    assert opus[1]["attempt"] == 2
    types = {e["type"] for e in debates.events(d.id)}
    assert types >= {"debate_started", "message_posted", "stage_transition",
                     "steelman_attempt", "steelman_graded", "commitment_made",
                     "falsifier_declared", "lock_attempted", "lock_succeeded",
                     "debate_complete"}
    transcript = (debates.dir / d.id / "transcript.md").read_text()
    assert "## CRUX_LOCK" in transcript and "GRADE_STEELMAN" in transcript
    posted = [e for e in debates.events(d.id) if e["type"] == "message_posted"]
    assert len(posted) == d.seq == len(debates.moves(d.id))


def two(budgets: dict[str, tuple[int, int]]) -> Debate:
    return Debate("debate-1T1-0000", "AI adoption", ["a", "b"], budgets)


def moves(d: Debate, *steps: tuple[str, dict[str, Any]]) -> None:
    for author, move in steps:
        d.apply({"author": author, "content": "x", **move})


def test_each_lock_criterion_fails_on_its_own() -> None:
    d = two({"DISCOVERY": (1, 2), "CRUX_LOCK": (30, 40), "EVIDENCE": (2, 4)})
    moves(d, ("a", {"move": "PROPOSE_QUESTION", "question": "Will adoption pass 40%?"}))
    assert d.stage == "CRUX_LOCK"
    moves(d, ("b", {"move": "COMMIT", "side": "YES", "falsifier": FALSIFIER, FLIP: False}))
    assert any("at least 2" in f for f in d.lock_failures())
    moves(d, ("a", {"move": "COMMIT", "side": "YES", "falsifier": FALSIFIER}))
    assert [f for f in d.lock_failures() if "YES and a NO" in f]
    moves(d, ("b", {"move": "STEELMAN", "target": "a"}),
          ("a", {"move": "GRADE_STEELMAN", "grade": "WRONG"}),
          ("a", {"move": "COMMIT", "side": "NO", "falsifier": FALSIFIER, FLIP: False}))
    assert [f for f in d.lock_failures() if "every steelman" in f]
    assert not [f for f in d.lock_failures() if "YES and a NO" in f]
    moves(d, ("b", {"move": "STEELMAN", "target": "a"}),
          ("a", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}))
    assert d.lock_failures() == [MUTUAL + "a"]
    moves(d, ("a", {"move": "STEELMAN", "target": "b"}),
          ("b", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}))
    assert d.lock_failures() == []
    d2 = two({"DISCOVERY": (1, 2), "CRUX_LOCK": (30, 40), "EVIDENCE": (2, 4)})
    moves(d2, ("a", {"move": "PROPOSE_QUESTION", "question": "Will adoption pass 40%?"}),
          ("b", {"move": "COMMIT", "side": "YES", FLIP: False}),
          ("a", {"move": "COMMIT", "side": "NO", "falsifier": FALSIFIER, FLIP: False}),
          ("b", {"move": "STEELMAN", "target": "a"}),
          ("a", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}),
          ("a", {"move": "STEELMAN", "target": "b"}),
          ("b", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}))
    assert d2.lock_failures() == ["committed participants without a falsifier: b"]


def test_the_moderator_prompts_then_frames_then_derives_falsifiers() -> None:
    d = two({"DISCOVERY": (1, 2), "CRUX_LOCK": (2, 10), "EVIDENCE": (2, 4)})
    moves(d, ("a", {"move": "PROPOSE_QUESTION", "question": "Will adoption reach 40%?"}),
          ("b", {"move": "COMMIT", "side": "YES", "content": "Adoption reaches 40% by 2029",
                 FLIP: False}),
          ("a", {"move": "COMMIT", "side": "UNCERTAIN"}))
    assert [e["attempt"] for e in d.events if e["type"] == "lock_failed"] == [1]
    assert "does not lock yet" in d.messages[-1]["content"]
    moves(d, ("b", {"move": "TOP_CLAIM", "top_claim": {"statement": "it spreads",
                                                        "side": "YES"}}),
          ("a", {"move": "COMMIT", "side": "NO", "content": "It stays below 40% by 2029",
                 FLIP: False}))
    assert [e["attempt"] for e in d.events if e["type"] == "lock_failed"] == [1, 2]
    assert "Binary framing" in d.messages[-1]["content"]
    moves(d, ("b", {"move": "STEELMAN", "target": "a"}),
          ("a", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}))
    assert "derives falsifiers from the dialogue for b, a" in d.messages[-1]["content"]
    assert d.lock_failures() == [MUTUAL + "a"]  # the third attempt failed on that alone
    moves(d, ("a", {"move": "STEELMAN", "target": "b"}),
          ("b", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}))
    ok = [e for e in d.events if e["type"] == "lock_succeeded"]
    assert ok and ok[0]["attempt"] == 4
    assert d.stage == "EVIDENCE"
    assert d.falsifiers["a"][0]["threshold"] == "40%" and d.falsifiers["a"][0]["deadline"] == "2029"


def test_a_lock_that_never_holds_ends_the_debate() -> None:
    d = two({"DISCOVERY": (1, 2), "CRUX_LOCK": (1, 3), "EVIDENCE": (2, 4)})
    moves(d, ("a", {"move": "PROPOSE_QUESTION", "question": "Will it rain?"}),
          ("b", {"move": "COMMIT", "side": "UNCERTAIN"}),
          ("a", {"move": "COMMIT", "side": "UNCERTAIN"}),
          ("b", {"move": "PASS"}))
    assert d.stage == "ENDED" and "would not lock" in d.ended
    assert d.crux()["validated"] is False


@pytest.mark.parametrize(("author", "move", "reason"), [
    ("mira", {"move": "CLAIM"}, "opus's turn"),
    ("opus", {"move": "COMMIT", "side": "YES"}, "not allowed in DISCOVERY"),
    ("opus", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}, "not allowed in DISCOVERY"),
    ("zed", {"move": "CLAIM"}, "does not take part"),
    ("opus", {"move": "TOP_CLAIM", "top_claim": {"statement": "x", "side": "MAYBE"}},
     "a TopClaim needs"),
    ("opus", {"move": "CLAIM", "content": ""}, "needs content"),
])
def test_illegal_moves_are_refused_logged_and_never_enter(
        debates: Debates, author: str, move: dict[str, Any], reason: str) -> None:
    d = debates.start("Tests before features", PEOPLE, "operator")
    with pytest.raises(IllegalMove, match=reason):
        debates.move(d.id, author, {"content": "text", **move})
    refused = [e for e in debates.events(d.id) if e["type"] == "move_refused"]
    assert reason.split("'", maxsplit=1)[0] in refused[-1]["reason"] and debates.moves(d.id) == []


def test_challenge_needs_an_accurate_steelman_and_nobody_grades_itself() -> None:
    d = two({"DISCOVERY": (1, 2), "CRUX_LOCK": (1, 20), "EVIDENCE": (10, 20)})
    moves(d, ("a", {"move": "PROPOSE_QUESTION", "question": "Will adoption pass 40%?"}),
          ("b", {"move": "COMMIT", "side": "YES", "falsifier": FALSIFIER, FLIP: False}),
          ("a", {"move": "COMMIT", "side": "NO", "falsifier": FALSIFIER, FLIP: False}),
          ("b", {"move": "STEELMAN", "target": "a"}))
    with pytest.raises(IllegalMove, match="grade b's steelman of you first"):
        moves(d, ("a", {"move": "FALSIFIER", "falsifier": FALSIFIER}))
    with pytest.raises(IllegalMove, match="it is a's turn"):
        moves(d, ("b", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}))  # self-grading
    moves(d, ("a", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}),
          ("a", {"move": "STEELMAN", "target": "b"}),
          ("b", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}),
          ("b", {"move": "PROPOSE_LOCK"}))
    assert d.stage == "EVIDENCE"
    moves(d, ("a", {"move": "CHALLENGE", "target": "b"}))  # a's steelman of b was ACCURATE
    moves(d, ("b", {"move": "STEELMAN", "target": "a"}),
          ("a", {"move": "GRADE_STEELMAN", "grade": "INCOMPLETE"}))
    with pytest.raises(IllegalMove, match="only after a steelman of a graded ACCURATE"):
        moves(d, ("a", {"move": "EVIDENCE", "bears_on": "F1"}),
              ("b", {"move": "CHALLENGE", "target": "a"}))  # its latest is INCOMPLETE


def test_budgets_end_each_stage(debates: Debates) -> None:
    d = debates.start("x", ["opus", "mira"], "operator",
                      budgets={"DISCOVERY": (1, 2), "CRUX_LOCK": (1, 2), "EVIDENCE": (1, 2)})
    debates.move(d.id, "opus", {"move": "CLAIM", "content": "no question yet"})
    d = debates.move(d.id, "mira", {"move": "CLAIM", "content": "still none"})
    assert d.stage == "CRUX_LOCK" and d.question == "Is it true that x?"  # framed at budget


def test_a_cheap_concession_is_flagged() -> None:
    d = two({"DISCOVERY": (1, 2), "CRUX_LOCK": (1, 20), "EVIDENCE": (10, 20)})
    claim = {"statement": "adoption wins", "side": "YES"}
    moves(d, ("a", {"move": "PROPOSE_QUESTION", "question": "Will adoption pass 40%?"}),
          ("b", {"move": "TOP_CLAIM", "top_claim": claim}),
          ("a", {"move": "COMMIT", "side": "NO", "falsifier": FALSIFIER, FLIP: False}),
          ("b", {"move": "COMMIT", "side": "YES", "falsifier": FALSIFIER, FLIP: True}),
          ("a", {"move": "STEELMAN", "target": "b"}),
          ("b", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}),
          ("b", {"move": "STEELMAN", "target": "a"}),
          ("a", {"move": "GRADE_STEELMAN", "grade": "ACCURATE"}))
    assert d.stage == "EVIDENCE", d.lock_failures()
    for _ in range(3):
        moves(d, (d.owed_by(), {"move": "EVIDENCE", "bears_on": "F2"}))
    if d.owed_by() != "b":
        moves(d, ("a", {"move": "EVIDENCE", "bears_on": "F1"}))
    moves(d, ("b", {"move": "CONCEDE", "side": "NO"}))
    assert d.crux()["cheap_concessions"] == ["b"]


def test_the_event_log_catches_up_after_a_crash(debates: Debates) -> None:
    d = debates.start("Tests before features", ["opus", "mira"], "operator")
    d = debates.move(d.id, "opus", play(d.situation("opus")))
    # mira's daemon died after writing its move, before logging its events
    move = {**play(d.situation("mira")), "author": "mira", "seq": 2}
    (debates.dir / d.id / "moves" / "0002-mira.json").write_text(json.dumps(move))
    d = debates.load(d.id)
    debates.move(d.id, "opus", play(d.situation("opus")))
    posted = [e["seq"] for e in debates.events(d.id) if e["type"] == "message_posted"]
    assert posted == [1, 2, 3]


def test_a_move_file_written_around_the_rules_does_not_count(debates: Debates) -> None:
    d = debates.start("Tests before features", ["opus", "mira"], "operator")
    forged = {"author": "mira", "seq": 1, "move": "CLAIM", "content": "out of turn"}
    (debates.dir / d.id / "moves").mkdir()
    (debates.dir / d.id / "moves" / "0001-mira.json").write_text(json.dumps(forged))
    d = debates.load(d.id)
    assert d.seq == 0 and d.owed_by() == "opus"


def test_a_debate_written_with_epoch_timestamps_still_shows(debates: Debates) -> None:
    from shared.debates.summary import summary

    d = debates.start("Tests before features", ["opus", "mira"], "operator")
    folder = debates.dir / d.id
    header = json.loads((folder / "thread.json").read_text())
    (folder / "thread.json").write_text(json.dumps({**header, "ts": 1_700_000_000.0}))
    (folder / "moves").mkdir()
    move = {**play(d.situation("opus")), "author": "opus", "seq": 1, "ts": 1_700_000_042.0}
    (folder / "moves" / "0001-opus.json").write_text(json.dumps(move))
    assert summary(debates, debates.load(d.id))["seconds"] == 42.0


def test_owed_replays_only_debates_that_moved(debates: Debates,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ended = run_out(debates, debates.start("Tests before features", PEOPLE, "operator").id)
    running = debates.start("Tests after features", ["opus", "mira"], "operator")
    replays: list[str] = []
    load = Debates.load

    def counted_load(self: Debates, did: str) -> Debate:
        replays.append(did)
        return load(self, did)

    monkeypatch.setattr(Debates, "load", counted_load)
    assert [d.id for d in debates.owed("opus")] == [running.id]
    assert ended.id not in replays  # its crux is written: never replayed
    replays.clear()
    assert [d.id for d in debates.owed("mira")] == [] and replays == []  # nothing moved
    debates.move(running.id, "opus", play(running.situation("opus")))
    replays.clear()
    assert [d.id for d in debates.owed("mira")] == [running.id] and replays == [running.id]


def test_a_debate_ends_at_its_cost_target(debates: Debates) -> None:
    """The seed's target (< $0.50 a debate) as a budget: when the moves' reported cost
    reaches the cap fixed at start, the debate ends, saying why - every reader's replay
    agrees. Before, nothing bounded a debate's dollars (a three-way one is ≈50 wakes)."""
    d = debates.start("Tests before features", ["opus", "mira"], "operator", usd_cap=0.01)
    for _ in range(2):
        me = d.owed_by()
        d = debates.move(d.id, me, {"move": "CLAIM", "content": f"{me}: reverts cost more",
                                    "cost": {"calls": 1, "usd": 0.006, "tokens": 900}})
    assert d.stage == "ENDED" and "over its cost target" in d.ended and "$0.01" in d.ended
    assert debates.load(d.id).stage == "ENDED"
    uncapped = debates.start("Tabs or spaces", ["opus", "mira"], "operator")
    for _ in range(2):
        me = uncapped.owed_by()
        uncapped = debates.move(uncapped.id, me, {"move": "CLAIM", "content": "spaces",
                                                  "cost": {"usd": 0.9}})
    assert uncapped.stage == "DISCOVERY"
