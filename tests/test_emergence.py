"""The seed's six emergence indicators and its Quality Rubric, each on records whose value
is known by hand, and `citizen consensus report` showing them all."""

from __future__ import annotations

import itertools
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from citizen import civilization, config
from citizen.cli import cli
from shared.consensus import Consensus, emergence, metacognition, rubric
from tests.thoughtworld import HELLO, commons, env, proposal, vote


@pytest.fixture
def c(tmp_path: Path) -> Consensus:
    return commons(tmp_path / "shared")


_SERIAL = itertools.count()


def own(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with justifications of its own: one repeated from another proposal is a
    gaming flag, which would make every proposal here conflicted."""
    n = next(_SERIAL)
    return {**body, "value_justification": {
        v: f"{why} (proposal number {n})" for v, why in body["value_justification"].items()}}


def opened(c: Consensus, body: dict[str, Any] | None = None) -> tuple[str, dict[str, str]]:
    d = c.request(HELLO, "opus", "operator")
    c.propose(d.id, "opus", own(body or proposal()))
    return d.id, d.roles


def finish(c: Consensus, pid: str, roles: dict[str, str], verified: bool = True) -> None:
    """Execute an approved proposal, check its outcome and record its episode."""
    c.execute(pid, "opus", env())
    c.check(pid, roles["verifier"], {"outcomes_verified": verified, "rationale": "checked"})
    c.record(pid, roles["integrator"], {"key_learnings": ["one round sufficed"]})


def unanimous(c: Consensus, verified: bool = True) -> str:
    pid, roles = opened(c)
    c.verify(pid, roles["verifier"], vote())
    c.integrate(pid, roles["integrator"], vote())
    finish(c, pid, roles, verified)
    return pid


def with_a_concern(c: Consensus) -> str:
    pid, roles = opened(c)
    c.verify(pid, roles["verifier"], vote("approve_with_concerns", "does it exist already?"))
    c.integrate(pid, roles["integrator"], vote())
    finish(c, pid, roles)
    return pid


def rejected_twice_then(c: Consensus, final: dict[str, Any]) -> str:
    """Both reviewers object in round 1; the executor revises to `final`, both approve."""
    pid, roles = opened(c)
    c.verify(pid, roles["verifier"], vote("reject", "it may overwrite an existing file"))
    c.integrate(pid, roles["integrator"], vote("reject"))
    c.propose(pid, "opus", own({**final, "response_to_concerns": "checked both concerns"}))
    c.verify(pid, roles["verifier"], vote())
    c.integrate(pid, roles["integrator"], vote())
    finish(c, pid, roles)
    return pid


# ------------------------------------------------------------ the Quality Rubric


def test_the_rubric_of_a_clean_first_round_execution(c: Consensus) -> None:
    d = c.load(unanimous(c))
    # correctness 5: verified, and the mechanical check (hello.md holds the text) met;
    # safety 5: hello.md is named by the expected outcome; coherence 2 + 2 (the integrator
    # approved) with no coherence check and no cited episode; maintainability 5 (commit,
    # risks, a learning, nothing unanswered, one action); efficiency 5 (one round).
    assert rubric.score(d) == {"correctness": 5.0, "safety": 5.0, "coherence": 4.0,
                               "maintainability": 5.0, "efficiency": 5.0, "overall": 4.8}


def test_the_rubric_of_a_reverted_outcome_and_none_for_a_rejection(c: Consensus) -> None:
    reverted = c.load(unanimous(c, verified=False))
    # the verifier said no though the mechanical check met: correctness 2; safety 4
    # (reverted); efficiency 4 (the work was thrown away)
    assert rubric.score(reverted) == {"correctness": 2.0, "safety": 4.0, "coherence": 4.0,
                                      "maintainability": 5.0, "efficiency": 4.0,
                                      "overall": 3.8}
    pid, _ = opened(c, proposal("evil.md", "x"))
    c.decide_human(pid, "root", "reject", "no")
    assert c.load(pid).result == "rejected" and rubric.score(c.load(pid)) is None
    data = emergence.report(c)
    assert data["rubric_scored"] == 1 and data["rubric_unscored_never_executed"] == 1
    assert data["rubric_means"]["overall"] == 3.8


def test_an_unpredicted_file_costs_safety(c: Consensus) -> None:
    body = proposal()
    body["actions"].append({"tool": "write_file", "args": {"path": "extra.md",
                                                           "content": "unasked"}})
    pid, roles = opened(c, body)
    c.verify(pid, roles["verifier"], vote())
    c.integrate(pid, roles["integrator"], vote())  # flagged: sent back to its proposer
    c.propose(pid, "opus", {**body, "response_to_concerns":
                            "extra.md is a scratch note the task allows; nothing reads it"})
    c.verify(pid, roles["verifier"], vote())
    c.integrate(pid, roles["integrator"], vote())
    finish(c, pid, roles)
    assert rubric.safety(c.load(pid)) == 4.0  # extra.md is in no expected outcome


# ------------------------------------------------------------ 2. productive conflict


def test_productive_conflict_compares_conflicted_with_unanimous(c: Consensus) -> None:
    unanimous(c, verified=False)  # overall 3.8, unanimous in round one
    with_a_concern(c)  # overall 4.8, conflicted (a concern)
    pid, _ = opened(c)
    c.decide_human(pid, "root", "reject", "not now")  # never executed: in neither group
    pc = emergence.report(c)["productive_conflict"]
    assert pc["conflicted"] == 1 and pc["unanimous"] == 1
    assert pc["conflicted_mean"] == 4.8 and pc["unanimous_mean"] == 3.8
    assert pc["delta_pct"] == round((4.8 - 3.8) / 3.8 * 100, 1) == 26.3


def test_productive_conflict_needs_both_groups(c: Consensus) -> None:
    with_a_concern(c)
    pc = emergence.report(c)["productive_conflict"]
    assert pc["unanimous"] == 0 and pc["delta_pct"] is None


# ------------------------------------------------------------ 4. value coherence


def test_identical_weight_changes_after_the_same_episodes_correlate_fully(
        c: Consensus) -> None:
    for ep, delta in (("ep-1", 0.1), ("ep-2", -0.05), ("ep-3", 0.05)):
        for who in ("opus", "mira"):
            c.weights.adjust(who, "safety", delta, episodes=[ep], approved_by="aria",
                             reason="the same lesson")
    vc = emergence.report(c)["value_coherence"]
    assert vc["r"] == 1.0 and vc["pairs"] == 3 and vc["episodes"] == 3


def line(citizen: str, value: str, delta: float, episode: str) -> dict[str, Any]:
    return {"citizen": citizen, "value": value, "delta": delta, "episodes": [episode]}


def test_opposite_weight_changes_correlate_negatively() -> None:
    history = [line(who, "truth", sign * d, ep)
               for ep, d in (("ep-1", 0.1), ("ep-2", 0.05), ("ep-3", -0.02))
               for who, sign in (("opus", 1), ("mira", -1))]
    assert emergence.value_coherence(history)["r"] == -1.0


def test_value_coherence_pairs_only_the_same_value_after_the_same_episode() -> None:
    history = [line("opus", "truth", 0.1, "ep-1"), line("mira", "safety", 0.1, "ep-1"),
               line("opus", "truth", 0.1, "ep-2"), line("mira", "truth", 0.1, "ep-3"),
               line("opus", "truth", 0.5, "ep-4"), line("mira", "truth", 0.5, "ep-4")]
    vc = emergence.value_coherence(history)  # no pair; over MAX_STEP is left out
    assert vc == {"r": None, "pairs": 0, "episodes": 3, "target": "r > 0.6"}
    two = [line(w, "truth", d, e) for e, d in (("ep-1", 0.1), ("ep-2", -0.1))
           for w in ("opus", "mira")]
    assert emergence.value_coherence(two)["r"] is None  # fewer than MIN_PAIRS


# ------------------------------------------------------------ 5. novel consensus


def test_a_new_step_after_both_reviewers_objected_is_a_third_way(c: Consensus) -> None:
    third = proposal()
    third["actions"].append({"tool": "write_file", "args": {
        "path": "CHANGELOG.md", "content": "hello.md added after an existence check"}})
    third["expected_outcomes"].append("CHANGELOG.md says hello.md was added")
    third_pid = rejected_twice_then(c, third)
    reworded = rejected_twice_then(c, proposal(content="Hello, world!"))
    with_a_concern(c)  # no revision: not a compromise
    assert emergence.third_way(c.load(third_pid))
    assert emergence.is_compromise(c.load(reworded)) and not emergence.third_way(
        c.load(reworded))  # the same file reworded: adjusting, not a third way
    nc = emergence.report(c)["novel_consensus"]
    assert nc["compromises"] == 2 and nc["third_way"] == 1 and nc["rate"] == 0.5


# ------------------------------------------------------------ 6. metacognitive depth


@pytest.mark.parametrize(("text", "rung"), [
    ("hello.md may exist already", 0),
    ("We keep a backup in git", 0),
    ("The server process should exit 0", 0),
    ("On reflection my review missed the encoding", 1),
    ("I notice I keep proposing file writes without checking existence first", 1),
    ("Three of the last five proposals needed revision for this reason", 2),
    ("This is a recurring pattern", 2),
    ("Executor should add 'check existence' as default step in proposal template", 3),
    ("I'm recording this as a pattern in memory/patterns.jsonl", 3),
    ("From now on, check existence first.", 3),
])
def test_depth_climbs_the_seeds_rungs(text: str, rung: int) -> None:
    assert metacognition.depth(text) == rung


def at(monkeypatch: pytest.MonkeyPatch, day: str) -> None:
    """World time is `day` (midnight UTC) from now on."""
    start = datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()
    monkeypatch.setenv("EXPERIENCE_CLOCK", f"{start},{time.time()},1")


def test_metacognitive_depth_is_reported_per_week_with_its_trend(
        c: Consensus, monkeypatch: pytest.MonkeyPatch) -> None:
    at(monkeypatch, "2026-01-05")  # a Monday: ISO week 2
    pid, roles = opened(c)
    c.verify(pid, roles["verifier"], {"decision": "approve", "rationale": "the text matches",
                                      "concerns": [], "values": ["truth"]})
    c.integrate(pid, roles["integrator"], {"decision": "reject", "values": ["coherence"],
                                           "rationale": "hello.md exists already"})
    at(monkeypatch, "2026-01-12")  # week 3
    c.propose(pid, "opus", own(proposal(
        response_to_concerns="I overlooked that hello.md exists")))
    c.verify(pid, roles["verifier"], {
        "decision": "approve_with_concerns", "values": ["truth"],
        "rationale": "On reflection my review missed it",
        "concerns": ["three of the last five proposals overwrote files"]})
    c.integrate(pid, roles["integrator"], {
        "decision": "approve", "values": ["coherence"],
        "rationale": "From now on the proposal template checks existence"})
    md = emergence.report(c)["metacognitive_depth"]
    # week 2: two texts at rung 0; week 3: rungs 1 (response), 1, 2 (verifier), 3
    assert md["by_week"] == {"2026-W02": {"texts": 2, "mean_depth": 0.0, "max": 0},
                             "2026-W03": {"texts": 4, "mean_depth": 1.75, "max": 3}}
    assert md["mean"] == round(7 / 6, 3) and md["trend_per_week"] == 1.75


# ------------------------------------------------------------ the operator's report


def test_consensus_report_shows_all_six_indicators_and_the_rubric(civ: Path) -> None:
    cc = civilization.consensus(config.templates())
    unanimous(cc)
    runner = CliRunner()
    out = runner.invoke(cli, ["consensus", "report"])
    assert out.exit_code == 0, out.output
    for name in ("1. emergent solutions", "2. productive conflict",
                 "3. integrated memory usage", "4. value coherence", "5. novel consensus",
                 "6. metacognitive depth", "Quality rubric"):
        assert name in out.stdout
    assert "correctness 5.0" in out.stdout and "target r > 0.6" in out.stdout
    data = json.loads(runner.invoke(cli, ["proposal", "report", "--json"]).stdout)
    assert data["decided"] == 1 and data["rubric_means"]["overall"] == 4.8
    for key in ("emergent_solutions_rate", "productive_conflict", "memory_citation_rate",
                "value_coherence", "novel_consensus", "metacognitive_depth"):
        assert key in data
    assert data["productive_conflict"]["unanimous"] == 1
    # the seed's random audit: one decided proposal (a tenth, at least one) for a person
    assert len(data["audit_sample"]) == 1 and "Random audit" in out.stdout
    assert data["red_team_reviews"] == 0 and data["diversity_perturbations"] == 0
