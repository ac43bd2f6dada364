"""The debate plan's quality checks (issue 30): mutual steelmans before the crux locks,
the counterfactual "would your TopClaim flip?" asked and recorded at the lock, evidence
that names its falsifier, no measurement questions, and a flag on graders who pass more
than 90 % of steelmans - each a rule over moves, whatever the participants say."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shared.debates import Debate, Debates, IllegalMove
from shared.errors import Invalid
from tests.debating import FALSIFIER, play

FLIP = "top_claim_would_flip"
LOCK = {"DISCOVERY": (1, 2), "CRUX_LOCK": (1, 30), "EVIDENCE": (10, 20)}
CLAIM = {"statement": "adoption wins", "side": "YES"}


def apply(d: Debate, *steps: tuple[str, dict[str, Any]]) -> None:
    for author, move in steps:
        d.apply({"author": author, "content": "x", **move})


def committed(people: list[str], sides: dict[str, str], *, flips: bool = True) -> Debate:
    """A debate in CRUX_LOCK where everyone has a TopClaim, a side and a falsifier (and,
    with `flips`, has answered the counterfactual question)."""
    d = Debate("debate-1T1-0000", "AI adoption", people, dict(LOCK))
    apply(d, (people[0], {"move": "PROPOSE_QUESTION", "question": "Will adoption pass 40%?"}))
    for _ in people:
        p = d.owed_by()
        apply(d, (p, {"move": "TOP_CLAIM", "top_claim": {**CLAIM, "side": sides[p]}}))
    for _ in people:
        p = d.owed_by()
        apply(d, (p, {"move": "COMMIT", "side": sides[p], "falsifier": FALSIFIER,
                      **({FLIP: True} if flips else {})}))
    return d


def steelman(d: Debate, author: str, target: str, grade: str = "ACCURATE") -> None:
    """`author` steelmans `target`, who grades it (others PASS until it is `author`'s turn)."""
    while d.owed_by() != author:
        apply(d, (d.owed_by(), {"move": "PASS"}))
    apply(d, (author, {"move": "STEELMAN", "target": target}),
          (target, {"move": "GRADE_STEELMAN", "grade": grade}))


def propose_lock(d: Debate) -> None:
    """A lock attempt now (unless the last move's attempt already locked)."""
    if d.stage == "CRUX_LOCK":
        apply(d, (d.owed_by(), {"move": "PROPOSE_LOCK"}))


# ------------------------------------------------------------ a. mutual steelmans

def test_one_accurate_steelman_does_not_lock_the_crux() -> None:
    """The plan: "tracks mutual steelmans (both A->B and B->A)". One accurate steelman
    used to lock the crux."""
    d = committed(["a", "b"], {"a": "YES", "b": "NO"})
    steelman(d, "b", "a")
    propose_lock(d)
    assert d.stage == "CRUX_LOCK"
    assert any("mutual" in f and f.endswith("none yet by: a") for f in d.lock_failures())
    steelman(d, "a", "b", "INCOMPLETE")
    propose_lock(d)
    assert d.stage == "CRUX_LOCK"
    steelman(d, "a", "b")
    assert d.lock_failures() == []
    propose_lock(d)
    assert d.stage == "EVIDENCE"


def test_with_three_each_side_steelmans_the_other() -> None:
    """opus (YES) and mira (NO) steelmanned each other; aria (NO) did not steelman the YES
    side, so the crux does not lock until it does."""
    d = committed(["opus", "mira", "aria"], {"opus": "YES", "mira": "NO", "aria": "NO"})
    steelman(d, "opus", "mira")
    steelman(d, "mira", "opus")
    propose_lock(d)
    assert d.stage == "CRUX_LOCK"
    assert next(f for f in d.lock_failures() if "mutual" in f).endswith("none yet by: aria")
    steelman(d, "aria", "mira")  # its own side does not count
    assert next(f for f in d.lock_failures() if "mutual" in f).endswith("none yet by: aria")
    steelman(d, "aria", "opus")
    assert d.lock_failures() == []


# ------------------------------------------------------------ b. the counterfactual question

def test_the_flip_question_is_asked_and_its_answer_recorded_at_lock() -> None:
    """Each participant answers "would your TopClaim flip if the crux resolved the other
    way?" before the crux locks; the crux reports those answers, never an inference from
    sided claims (which used to call both TopClaims linked here)."""
    d = committed(["a", "b"], {"a": "YES", "b": "NO"}, flips=False)
    steelman(d, "a", "b")
    steelman(d, "b", "a")
    propose_lock(d)
    assert d.stage == "CRUX_LOCK"
    (asked,) = [f for f in d.lock_failures() if "would your TopClaim flip" in f]
    assert asked.endswith(": a, b")
    asks = [m["content"] for m in d.messages if m["author"] == "moderator"
            and "would your TopClaim flip" in m["content"]]
    assert [a.split(":")[0] for a in asks] == ["b", "a"]  # asked as each one committed
    with pytest.raises(IllegalMove, match="true or false"):
        apply(d, (d.owed_by(), {"move": "COMMIT", "side": "YES", FLIP: "yes"}))
    first = d.owed_by()
    apply(d, (first, {"move": "COMMIT", "side": "YES" if first == "a" else "NO",
                      FLIP: first == "a"}))
    other = d.owed_by()
    apply(d, (other, {"move": "COMMIT", "side": "YES" if other == "a" else "NO",
                      FLIP: other == "a"}))
    propose_lock(d)
    assert d.stage == "EVIDENCE"
    (locked,) = [e for e in d.events if e["type"] == "lock_succeeded"]
    assert locked["would_flip"] == {"a": True, "b": False}
    crux = d.crux()
    assert crux["counterfactual"]["a"]["top_claim_would_flip"] is True
    assert crux["counterfactual"]["b"]["top_claim_would_flip"] is False
    assert crux["counterfactual"]["b"]["answered"] is True
    assert any("fewer than 2 participants answered" in f for f in crux["failed_checks"])


def test_a_yes_needs_a_top_claim_to_flip() -> None:
    d = Debate("debate-1T1-0000", "AI adoption", ["a", "b"], dict(LOCK))
    apply(d, ("a", {"move": "PROPOSE_QUESTION", "question": "Will adoption pass 40%?"}))
    with pytest.raises(IllegalMove, match="needs a TopClaim"):
        apply(d, ("b", {"move": "COMMIT", "side": "NO", FLIP: True}))
    apply(d, ("b", {"move": "COMMIT", "side": "NO", FLIP: False}))
    assert d.flip_answers["b"]["answer"] is False


# ------------------------------------------------------------ c. evidence names its falsifier

def test_evidence_must_name_a_declared_falsifier() -> None:
    d = committed(["a", "b"], {"a": "YES", "b": "NO"})
    steelman(d, "a", "b")
    steelman(d, "b", "a")
    propose_lock(d)
    assert d.stage == "EVIDENCE"
    who = d.owed_by()
    with pytest.raises(IllegalMove, match="must name the falsifier it bears on"):
        apply(d, (who, {"move": "EVIDENCE", "content": "7% of merges were reverted"}))
    with pytest.raises(IllegalMove, match=r"one of F1, F2; 'F9' is none of them"):
        apply(d, (who, {"move": "EVIDENCE", "bears_on": "F9"}))
    apply(d, (who, {"move": "EVIDENCE", "bears_on": "F2"}))
    assert d.messages[-1]["bears_on"] == "F2"
    on = {f["id"]: f["evidence"] for f in d.crux()["falsifiers"]}
    assert on == {"F1": [], "F2": [d.seq]}


# ------------------------------------------------------------ d. no measurement questions

@pytest.fixture
def debates(tmp_path: Path) -> Debates:
    return Debates(tmp_path / "shared", ["opus", "mira", "aria"], enforce_identity=False)


@pytest.mark.parametrize("topic", ["How much is a test suite worth?",
                                   "What is the value of code review",
                                   "how many citizens write tests first?",
                                   "To what extent do tests prevent reverts?"])
def test_a_measurement_question_is_no_debate_topic(debates: Debates, topic: str) -> None:
    with pytest.raises(Invalid, match=r"asks for a measurement.*yes/no question with a "
                                      r"threshold"):
        debates.start(topic, ["opus", "mira"], "operator")
    assert debates.ids() == []


def test_a_measurement_question_is_no_crux(debates: Debates) -> None:
    d = debates.start("Tests before features", ["opus", "mira"], "operator")
    with pytest.raises(IllegalMove, match="asks for a measurement"):
        debates.move(d.id, "opus", {"move": "PROPOSE_QUESTION", "content": "this",
                                    "question": "What is the value of writing tests first?"})
    d = debates.move(d.id, "opus", {"move": "PROPOSE_QUESTION", "content": "this",
                                    "question": "Is the value of tests above their cost?"})
    assert d.question == "Is the value of tests above their cost?"


# ------------------------------------------------------------ e. lenient graders

def run_out(debates: Debates, did: str) -> Debate:
    d = debates.load(did)
    while d.active:
        who = d.owed_by()
        d = debates.move(did, who, play(d.situation(who)))
    return d


def test_a_grader_passing_more_than_90_percent_is_flagged(debates: Debates) -> None:
    """The scripted debaters: opus grades every steelman of it ACCURATE (two a debate),
    mira grades opus's first tries INCOMPLETE. Under ten grades nobody is flagged."""
    for n in range(5):
        d = run_out(debates, debates.start(f"Tests before features {n}",
                                           ["opus", "mira", "aria"], "operator").id)
        assert d.stage == "CONVERGED", d.ended
        graders = debates.graders()
        if graders["opus"]["graded"] < 10:
            assert not graders["opus"]["lenient"]
    opus, mira = graders["opus"], graders["mira"]
    assert opus["graded"] >= 10 and opus["rate"] == 1.0 and opus["lenient"]
    assert not mira["lenient"] and mira["rate"] <= 0.9


def test_the_flag_is_shown_to_the_operator_and_to_the_grader(civ: Path) -> None:
    from citizen import civilization
    from citizen.cli import cli
    from citizen.llm.scripted import ScriptedProvider
    from citizen.wake.flow import run_wake
    from tests.scripts import say

    debates = civilization.debates()
    for n in range(5):
        run_out(debates, debates.start(f"Tests before features {n}",
                                       ["opus", "mira", "aria"], "operator").id)
    rows = json.loads(CliRunner().invoke(cli, ["debate", "graders", "--json"]).output)
    assert {r["grader"] for r in rows if r["lenient"]} == {"opus"}
    shown = CliRunner().invoke(cli, ["debate", "graders"]).output
    assert "LENIENT" in next(line for line in shown.splitlines() if line.startswith("opus"))
    # a steelman of opus waits for its grade: opus's prompt carries its record
    d = debates.start("Tabs or spaces", ["mira", "opus"], "operator",
                      budgets={"DISCOVERY": (1, 1), "CRUX_LOCK": (4, 8), "EVIDENCE": (2, 4)})
    d = debates.move(d.id, "mira", {"move": "CLAIM", "content": "spaces"})
    d = debates.move(d.id, "opus", {"move": "COMMIT", "side": "YES", "content": "tabs"})
    d = debates.move(d.id, "mira", {"move": "STEELMAN", "target": "opus", "content": "tabs"})
    assert d.owed_by() == "opus"
    model = ScriptedProvider(default=lambda request: say("not json at all"))
    run_wake("opus", wake_type="DEBATE", provider=lambda c, s: model)
    prompts = [json.dumps(r.to_dict()) for r in model.requests
               if r.purpose.startswith("debate_")]
    assert prompts and all("your_grading" in p and "ACCURATE (100%" in p for p in prompts)
