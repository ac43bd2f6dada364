"""The debate plan's numbers with the defaults - no budget overridden: each stage's
minimum and maximum (DISCOVERY 6-10, CRUX_LOCK 6-8, EVIDENCE 12-16 messages), EVIDENCE's
maximum ending in CONVERGED, the $0.50 cost target, a TopClaim's 0-1 confidence and the
crux written as the plan's `{"crux": {...}}`."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from citizen.config.settings import Budget
from shared.debates import Debate, Debates, IllegalMove
from shared.debates.moves import BUDGETS
from tests.debating import play

TWO = ["opus", "mira"]
QUESTION = "Will writing tests first cut reverts below 5% by 2027?"


@pytest.fixture
def debates(tmp_path: Path) -> Debates:
    return Debates(tmp_path / "shared", TWO, enforce_identity=False)


def step(debates: Debates, d: Debate, move: dict[str, Any]) -> Debate:
    return debates.move(d.id, d.owed_by(), {"content": "x", **move})


def to_evidence(debates: Debates) -> Debate:
    d = debates.start("Tests before features", TWO, "operator")
    while d.active and d.stage != "EVIDENCE":
        d = debates.move(d.id, d.owed_by(), play(d.situation(d.owed_by())))
    assert d.stage == "EVIDENCE" and d.stage_count == 0
    return d


def test_the_default_budgets_are_the_plans(debates: Debates) -> None:
    assert BUDGETS == {"DISCOVERY": (6, 10), "CRUX_LOCK": (6, 8), "EVIDENCE": (12, 16)}
    d = debates.start("Tests before features", TWO, "operator")
    assert debates.thread(d.id)["budgets"] == {s: list(v) for s, v in BUDGETS.items()}


def test_discovery_holds_a_binary_question_until_its_sixth_message(debates: Debates) -> None:
    d = debates.start("Tests before features", TWO, "operator")
    d = step(debates, d, {"move": "PROPOSE_QUESTION", "question": QUESTION})
    for _ in range(4):
        d = step(debates, d, {"move": "CLAIM"})
    assert d.stage == "DISCOVERY" and d.stage_count == 5
    d = step(debates, d, {"move": "CLAIM"})
    assert d.stage == "CRUX_LOCK" and d.question == QUESTION


def test_discovery_without_a_question_is_framed_at_its_tenth(debates: Debates) -> None:
    d = debates.start("Tests before features", TWO, "operator")
    for _ in range(9):
        d = step(debates, d, {"move": "CLAIM"})
    assert d.stage == "DISCOVERY"
    d = step(debates, d, {"move": "CLAIM"})
    assert d.stage == "CRUX_LOCK" and d.question == "Is it true that Tests before features?"


def test_crux_lock_ends_at_its_eighth_message_when_the_lock_never_holds(
        debates: Debates) -> None:
    d = debates.start("Tests before features", TWO, "operator")
    d = step(debates, d, {"move": "PROPOSE_QUESTION", "question": QUESTION})
    for _ in range(5):
        d = step(debates, d, {"move": "CLAIM"})
    assert d.stage == "CRUX_LOCK"
    for _ in range(7):  # nobody commits: no lock can hold
        d = step(debates, d, {"move": "PROPOSE_LOCK"})
    assert d.stage == "CRUX_LOCK" and d.stage_count == 7
    d = step(debates, d, {"move": "PROPOSE_LOCK"})
    assert d.stage == "ENDED" and d.ended.startswith("the crux would not lock")


def test_evidence_converges_at_its_twelfth_message_once_everyone_gave_some(
        debates: Debates) -> None:
    d = to_evidence(debates)
    for _ in range(11):
        d = step(debates, d, {"move": "EVIDENCE", "bears_on": "F1"})
    assert d.stage == "EVIDENCE"
    d = step(debates, d, {"move": "EVIDENCE", "bears_on": "F1"})
    assert d.stage == "CONVERGED" and d.ended == ""


def test_evidence_converges_at_its_sixteenth_message_if_someone_never_gave_any(
        debates: Debates) -> None:
    d = to_evidence(debates)
    silent = d.owed_by()
    for _ in range(15):
        d = step(debates, d, {"move": "PASS"} if d.owed_by() == silent
                 else {"move": "EVIDENCE", "bears_on": "F1"})
    assert d.stage == "EVIDENCE" and d.stage_count == 15
    d = step(debates, d, {"move": "PASS"} if d.owed_by() == silent
             else {"move": "EVIDENCE", "bears_on": "F1"})
    assert d.stage == "CONVERGED" and d.ended == "EVIDENCE used its budget"
    assert debates.result(d.id) is not None  # crystallized


def test_the_default_cost_target_is_fifty_cents(debates: Debates) -> None:
    default = {f.name: f.default for f in fields(Budget)}["max_usd_per_debate"]
    assert default == 0.5
    d = debates.start("Tests before features", TWO, "operator", usd_cap=default)
    d = step(debates, d, {"move": "CLAIM", "cost": {"usd": 0.49}})
    assert d.stage == "DISCOVERY"
    d = step(debates, d, {"move": "CLAIM", "cost": {"usd": 0.01}})
    assert d.stage == "ENDED" and "$0.50" in d.ended


@pytest.mark.parametrize("confidence", [7, -0.1, 1.01, "high", True])
def test_a_top_claims_confidence_is_between_0_and_1(debates: Debates,
                                                    confidence: Any) -> None:
    d = debates.start("Tests before features", TWO, "operator")
    claim = {"statement": "tests first is safer", "side": "YES", "confidence": confidence}
    with pytest.raises(IllegalMove, match="confidence is a number from 0 to 1"):
        step(debates, d, {"move": "TOP_CLAIM", "top_claim": claim})
    for fine in (0, 0.7, 1):
        d = step(debates, d, {"move": "TOP_CLAIM", "top_claim": {**claim, "confidence": fine}})


def test_the_crux_is_written_as_the_plans_output(debates: Debates) -> None:
    d = to_evidence(debates)
    while d.active:
        d = step(debates, d, {"move": "EVIDENCE", "bears_on": "F1"})
    written = json.loads((debates.dir / d.id / "crux.json").read_text())
    schema = json.loads((Path(__file__).parent.parent / "templates" / "schemas" /
                         "debate_crux.json").read_text())
    jsonschema.validate(written, schema)
    assert set(written) == {"crux"} and written["crux"]["question"] == QUESTION
    assert {"question", "positions", "falsifiers", "counterfactual", "validated"} \
        <= set(written["crux"])
    assert debates.result(d.id) == written["crux"]  # readers get the crux itself
