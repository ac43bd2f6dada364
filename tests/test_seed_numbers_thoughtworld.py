"""The Thought World seed's numbers (shared/seeds/000_…), each asserted BY VALUE.

Elsewhere the tests mostly use the code's own constants (`range(MAX_STEPS)`,
`RED_TEAM_EVERY`), which keep passing whatever the constant says. Here each number is
written out as the seed (or, where the seed names no number, the ledger in
docs/seeds.md) gives it, and checked at its boundary through the real code path where
that is cheap: pure functions and records in memory, no wake, model or daemon.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from citizen import config
from citizen.config import paths
from citizen.wake.types.consensus import PROPOSAL_MAX_TOKENS
from shared.consensus import Proposal, Vote, derive, emergence, metacognition, rubric
from shared.consensus.episodes import Episodes
from shared.consensus.gaming import flags
from shared.consensus.rules import (
    INTEGRATE_DECISIONS,
    MAX_ACTIONS,
    VERIFY_DECISIONS,
    proposal_problem,
    red_team,
)
from shared.consensus.tasks import next_step
from shared.consensus.values import load_framework
from shared.consensus.weighing import MAX_STEP, Framework, experimental, floors
from tests.thoughtworld import proposal, vote

ROLES = {"executor": "opus", "verifier": "mira", "integrator": "aria"}
PROFILES = {"opus": "executor", "mira": "verifier", "aria": "integrator"}
READ = {"tool": "read_file", "args": {"path": "README.md"}}
ACTIONS = {"low": [READ],
           "medium": [{"tool": "write_file", "args": {"path": "w.md", "content": "x"}}],
           "high": [{"tool": "delete_file", "args": {"path": "README.md"}}]}


def framework() -> Framework:
    return load_framework(paths.templates_dir() / "values.yaml")


def start_weights() -> dict[str, dict[str, float]]:
    fw = framework()
    return {c: fw.start(p) for c, p in PROFILES.items()}


def rounds(stakes: str, *votes: tuple[str, str], justification: dict[str, str] | None = None,
           ver_values: tuple[str, ...] = ("truth",), integ_values: tuple[str, ...] = ("truth",)
           ) -> Proposal:
    """A proposal with one revision per (verifier, integrator) decision pair, all in memory."""
    d = Proposal("prop-20260101T000000-0001", {"task": "t", "roles": ROLES})
    for r, (ver, integ) in enumerate(votes, start=1):
        body = {**proposal(), "actions": ACTIONS[stakes], "round": r}
        if justification is not None:
            body["value_justification"] = justification
        d.revisions.append(body)
        d.verifications[r] = cast(Vote, {**vote(ver, values=ver_values), "author": "mira"})
        d.integrations[r] = cast(Vote, {**vote(integ, values=integ_values), "author": "aria"})
    return d


# ------------------------------------------------------------ value weights


def test_role_weights_are_the_seeds() -> None:
    """000 L81, L108, L136 (and L907, L985-986): the three profiles' primary weights."""
    fw = framework()
    executor, verifier, integrator = (fw.profiles[r] for r in
                                      ("executor", "verifier", "integrator"))
    assert (executor["exploration"], executor["efficiency"], executor["truth"],
            executor["transparency"]) == (0.8, 0.75, 0.9, 0.85)
    assert (verifier["truth"], verifier["safety"], verifier["autonomy"]) == (1.0, 0.9, 0.7)
    assert (integrator["coherence"], integrator["cooperation"],
            integrator["transparency"]) == (0.85, 0.85, 0.9)


def test_the_diversity_floor_is_sigma_0_15() -> None:
    """000 L716: weight diversity target σ > 0.15 per value (the shipped file, the default,
    and the floor it gives exploration, the one value whose profiles start spread wider)."""
    fw = framework()
    assert fw.min_sigma == 0.15
    bare = Framework.parse({"base_values": {"truth": "t"}, "agent_roles": {
        "executor": {"weights": {"truth": 0.9}, "bounds": {"truth": [0.7, 1.0]}}}})
    assert bare.min_sigma == 0.15  # no `diversity:` in values.yaml: still the seed's
    floor = floors(fw, PROFILES.values(), fw.min_sigma)
    assert floor["exploration"] == 0.15  # profiles 0.8, 0.4, 0.6: σ 0.163, floored at 0.15


# ------------------------------------------------------------ stakes thresholds


def test_low_stakes_pass_with_two_of_three_whichever_reviewer_agrees() -> None:
    """000 L359, L365, L1105: low stakes need 2/3 - executor with the verifier OR the
    integrator; with neither it is discussed."""
    for ver, integ in (("reject", "approve"), ("approve", "reject")):
        d = derive(rounds("low", (ver, integ)), start_weights())
        assert d.stakes == "low" and d.phase == "execute", (ver, integ, d.why)
        assert d.consensus is not None and d.consensus["threshold"] == "2/3"
        assert d.consensus["approvals"] == 2
    d = derive(rounds("low", ("reject", "reject")), start_weights())
    assert d.phase == "revise" and d.level == "discussion"


def test_medium_stakes_need_all_three_and_high_a_person_too() -> None:
    """000 L360-361, L366-367, L1106-1107: medium unanimous; high unanimous + human."""
    d = derive(rounds("medium", ("reject", "approve")), start_weights())
    assert d.stakes == "medium" and d.phase == "revise"  # 2 of 3 is not enough
    d = derive(rounds("medium", ("approve_with_concerns", "approve")), start_weights())
    assert d.phase == "execute"
    assert d.consensus is not None and d.consensus["threshold"] == "unanimous"
    assert d.consensus["approvals"] == 3
    d = derive(rounds("high", ("approve", "approve")), start_weights())
    assert d.stakes == "high" and d.phase == "human" and d.owed_by == "operator"
    assert d.consensus is not None and d.consensus["threshold"] == "unanimous + human"


# ------------------------------------------------------------ the conflict ladder


def test_three_rounds_of_discussion_then_the_next_rung() -> None:
    """000 L373, L379, L659: discussion in rounds 1-3 (max 3 per proposal); after the
    third, low stakes go to the tiebreak and medium with dissent to a person."""
    no = ("reject", "reject")
    for r in (1, 2):
        d = derive(rounds("low", *[no] * r), start_weights())
        assert d.phase == "revise" and d.level == "discussion", r
    d = derive(rounds("low", no, no, no), start_weights())
    assert d.level in ("tiebreak", "human") and d.phase != "revise"
    assert d.tiebreak is not None  # the third round's result is the tiebreak's
    d = derive(rounds("medium", no, no), start_weights())
    assert d.phase == "revise" and d.level == "discussion"
    d = derive(rounds("medium", no, no, no), start_weights())
    assert d.phase == "human" and "medium stakes with dissent" in d.why


@pytest.mark.parametrize(("reject_weight", "contested"), [(0.905, True), (0.895, False)])
def test_a_tiebreak_won_by_less_than_ten_percent_is_contested(reject_weight: float,
                                                              contested: bool) -> None:
    """000 L393 (ledger's number): a tiebreak won by under 10 % is contested -> a human."""
    weights = {"opus": {"truth": 1.0}, "mira": {"safety": reject_weight},
               "aria": {"safety": 0.0}}
    no = ("reject", "reject")
    d = derive(rounds("low", no, no, no, justification={"truth": "the answer is read as is"},
                      ver_values=("safety",), integ_values=("safety",)), weights)
    assert d.tiebreak is not None and d.tiebreak["contested"] is contested
    if contested:
        assert d.phase == "human" and d.escalation == "tiebreak contested"
    else:
        assert d.tiebreak["winner"] == "approve" and d.phase == "execute"


def test_the_seeds_decision_and_severity_enums() -> None:
    """000 L277-294, L1022 (verifier), L1112 (integrator), L271/L932 (risk severity)."""
    assert VERIFY_DECISIONS == ("approve", "approve_with_concerns", "reject")
    assert INTEGRATE_DECISIONS == ("approve", "reject", "propose_compromise",
                                   "escalate_to_human")
    schema = json.loads((paths.templates_dir() / "schemas" / "consensus_proposal.json")
                        .read_text(encoding="utf-8"))
    risk = schema["properties"]["risk_assessment"]["items"]["properties"]
    assert risk["severity"] == {"enum": ["low", "medium", "high"]}


# ------------------------------------------------------------ caps and budgets


def test_a_queued_task_is_capped_at_fifty_calls(civ_root: Path) -> None:
    """000 L695: hard cap 50 API calls per task (the queued-task budget a citizen loads)."""
    assert config.load_citizen("opus").budget.max_calls_per_task == 50


def test_a_chain_takes_five_steps_and_no_sixth() -> None:
    """000 L586: a 5-step task - step 4 opens its next step, step 5 opens none."""
    def at(step: int) -> Proposal:
        d = Proposal("prop-20260101T000000-0005", {
            "task": "t", "roles": ROLES, "chain": {"task": "prop-0", "step": step}})
        d.revisions.append({**proposal(), "next_step": "one more"})
        d.result = "approved"
        return d

    assert next_step(at(4)) == ("one more", "")
    what, why = next_step(at(5))
    assert what == "" and "5 steps" in why


def test_a_batch_review_shares_at_most_five_proposals() -> None:
    """000 L696 (ledger's number): up to 5 low-stakes verifications share one call."""
    from citizen.wake.types.consensus import MAX_BATCH

    assert MAX_BATCH == 5


# ------------------------------------------------------------ episodic memory


def test_episodes_compact_past_two_hundred_keeping_the_last_hundred(tmp_path: Path) -> None:
    """000 L1174, L747: keep the last 100 in full (compaction at 200 is the ledger's)."""
    eps = Episodes(tmp_path / "shared")
    for n in range(200):
        eps.add({"id": f"ep-{n}", "goal": f"goal {n}", "outcome": "approved"})
    assert len(eps.all()) == 200 and eps.archive_all() == []  # 200 is not yet "past"
    eps.add({"id": "ep-200", "goal": "goal 200", "outcome": "approved"})
    assert [e["id"] for e in eps.all()] == [f"ep-{n}" for n in range(101, 201)]
    assert len(eps.archive_all()) == 101


# ------------------------------------------------------------ metrics and targets


@pytest.mark.parametrize(("stakes", "within", "past"), [("low", 1, 2), ("medium", 3, 4)])
def test_rounds_past_the_seeds_targets_cost_efficiency(stakes: str, within: int,
                                                       past: int) -> None:
    """000 L664: average rounds < 2 for low stakes, < 4 for medium (the rubric's allowance)."""
    def executed(n: int) -> Proposal:
        d = Proposal("prop-20260101T000000-0006", {"task": "t", "roles": ROLES})
        d.revisions = [proposal() for _ in range(n)]
        d.stakes, d.execution = stakes, {"success": True}
        d.outcome = {"outcomes_verified": True}
        return d

    assert rubric.efficiency(executed(within)) == 5.0
    assert rubric.efficiency(executed(past)) == 4.0


def test_the_emergence_targets_are_the_seeds() -> None:
    """000 L479, L484, L489, L494, L499, L699: the targets the report shows beside each
    indicator (observed, never optimised)."""
    from citizen.cli.consensus import _indicators

    data: dict[str, Any] = {
        "emergent_solutions_rate": None,
        "productive_conflict": emergence.productive_conflict([], {}),
        "memory_citation_rate": emergence.memory_citation([], set()),
        "value_coherence": emergence.value_coherence([]),
        "novel_consensus": emergence.novel_consensus([]),
        "metacognitive_depth": metacognition.by_week([])}
    targets = {name: target for name, _, target in _indicators(data)}
    assert targets == {"1. emergent solutions": "> 0.40", "2. productive conflict": "≥ +10%",
                       "3. integrated memory usage": "rising (0.10 week 1 → 0.50 month 3)",
                       "4. value coherence": "r > 0.6", "5. novel consensus": "≥ 0.20",
                       "6. metacognitive depth": "rising"}
    assert data["productive_conflict"]["target"] == "delta ≥ +10 %"
    assert data["novel_consensus"]["target"] == "rate ≥ 0.20"
    assert data["value_coherence"]["target"] == "r > 0.6"
    assert emergence.cost_per_proposal([])["target"] == "< $0.10 simple, < $0.50 complex"


# ------------------------------------------------------------ the ledger's numbers


def test_every_fifth_proposal_is_a_red_team_round() -> None:
    """000 L679 ("every Nth"; the ledger's N = 5): places 4, 9, 14 of the commons."""
    assert [p for p in range(15) if red_team(p)] == [4, 9, 14]


def test_one_proposal_in_ten_is_an_experimental_round() -> None:
    """000 L713 (the ledger's 1 in 10, at place 7 so never a red-team round)."""
    assert [p for p in range(30) if experimental(p)] == [7, 17, 27]


def test_random_audits_sample_a_tenth_at_least_one() -> None:
    """000 L729 (the ledger's share, 0.1 rounded up, at least one)."""
    assert len(emergence.audit_sample(["p0"])) == 1
    assert len(emergence.audit_sample([f"p{i}" for i in range(20)])) == 2
    assert len(emergence.audit_sample([f"p{i}" for i in range(21)])) == 3


def test_a_justification_under_six_words_is_generic() -> None:
    """000 L400 (the ledger's MIN_WORDS = 6): five words are flagged, six are not."""
    def flagged(text: str) -> bool:
        body = {**proposal(), "actions": [READ], "value_justification": {"truth": text}}
        return any("generic justification" in f for f in
                   flags(body, framework().base_values, {}))

    assert flagged("reads the file as written")
    assert not flagged("reads the file exactly as written")


def test_a_proposal_holds_at_most_four_actions_and_a_small_one_two() -> None:
    """Our number (the seed names none): 4 actions a proposal, in the schema the model fills
    and in the rules alike (the schema said 4 and the rules 8, so every proposal the model
    could write earned the rubric's small-change point); small is at most 2."""
    schema = config.templates().schema(
        "consensus_proposal", values=list(framework().base_values), action_tools=["write_file"],
        min_step=-MAX_STEP, max_step=MAX_STEP, max_actions=MAX_ACTIONS)
    assert schema["properties"]["actions"]["maxItems"] == 4
    assert proposal_problem({**proposal(), "actions": [READ] * 4}) == ""
    assert "at most 4 actions" in proposal_problem({**proposal(), "actions": [READ] * 5})

    def maintainability(n: int) -> float:
        d = Proposal("prop-20260101T000000-0007", {"task": "t", "roles": ROLES})
        d.revisions = [{**proposal(), "actions": [READ] * n}]
        return rubric.maintainability(d)

    assert maintainability(2) == maintainability(3) + 1
    assert PROPOSAL_MAX_TOKENS == 2048  # 000 L869: the executor's call
