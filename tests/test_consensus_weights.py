"""Value weights: a participant asks for a change to its own weights and another approves
it (never itself, whoever writes the history); experimental rounds of mirrored weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.consensus import Consensus
from shared.consensus.weighing import EXPERIMENT_AT, EXPERIMENT_EVERY, counter
from shared.errors import Invalid
from tests.thoughtworld import HELLO, commons, env, proposal, vote


@pytest.fixture
def c(tmp_path: Path) -> Consensus:
    c = commons(tmp_path / "shared")
    c.episodes.add({"id": "ep-earlier", "goal": "an earlier task", "outcome": "success"})
    return c


def ask(value: str = "exploration", delta: float = -0.05) -> dict[str, Any]:
    return {"value": value, "delta": delta, "episodes": ["ep-earlier"],
            "reason": "two episodes in a row my exploration cost a revert"}


def through(c: Consensus, body: dict[str, Any], verifier_vote: dict[str, Any],
            notes: dict[str, Any]) -> Any:
    d = c.request(HELLO, "opus", "operator")
    roles = d.roles
    c.propose(d.id, "opus", body)
    c.verify(d.id, roles["verifier"], verifier_vote)
    c.integrate(d.id, roles["integrator"], vote())
    c.execute(d.id, "opus", env())
    c.check(d.id, roles["verifier"], {"outcomes_verified": True, "rationale": "ok"})
    return c.record(d.id, roles["integrator"], notes)


def test_a_participant_asks_and_the_integrator_approves(c: Consensus) -> None:
    before = c.weights.current("opus")["exploration"]
    d = c.request(HELLO, "opus", "operator")
    verifier = d.roles["verifier"]
    verifier_before = c.weights.current(verifier)["safety"]
    c.propose(d.id, "opus", proposal(weight_request=ask()))
    c.verify(d.id, verifier, {**vote(), "weight_request": ask("safety", -0.05)})
    c.integrate(d.id, d.roles["integrator"], vote())
    c.execute(d.id, "opus", env())
    c.check(d.id, verifier, {"outcomes_verified": True, "rationale": "ok"})
    d = c.record(d.id, d.roles["integrator"], {"key_learnings": [], "weight_requests": [
        {"citizen": "opus", "decision": "approve", "reason": "the reverts bear it out"},
        {"citizen": verifier, "decision": "decline", "reason": "one episode is not a pattern"}]})
    assert c.weights.current("opus")["exploration"] == pytest.approx(before - 0.05)
    assert c.weights.current(verifier)["safety"] == pytest.approx(verifier_before)
    assert d.episode is not None
    asked = {r["citizen"]: r["decision"] for r in d.episode["weight_requests"]}
    assert asked == {"opus": "approve", verifier: "decline"}
    (line,) = c.weights.history()
    assert line["approved_by"] == d.roles["integrator"] and line["citizen"] == "opus"


def test_a_request_moves_nothing_without_the_integrator(c: Consensus) -> None:
    before = c.weights.current("opus")
    d = through(c, proposal(weight_request=ask()), vote(), {"key_learnings": []})
    assert c.weights.current("opus") == before
    assert d.episode["weight_requests"][0]["decision"] == "decline"


def test_a_malformed_request_is_refused_with_its_fix(c: Consensus) -> None:
    d = c.request(HELLO, "opus", "operator")
    with pytest.raises(Invalid, match="cite the episodes"):
        c.propose(d.id, "opus", proposal(weight_request={**ask(), "episodes": []}))
    with pytest.raises(Invalid, match="within"):
        c.propose(d.id, "opus", proposal(weight_request=ask(delta=0.5)))


def test_a_request_citing_an_episode_that_never_happened_is_refused(c: Consensus) -> None:
    d = c.request(HELLO, "opus", "operator")
    made_up = {**ask(), "episodes": ["ep-earlier", "ep-made-up"]}
    with pytest.raises(Invalid, match="no episode 'ep-made-up' was ever recorded"):
        c.propose(d.id, "opus", proposal(weight_request=made_up))
    c.propose(d.id, "opus", proposal(weight_request=ask()))  # a recorded one: taken
    with pytest.raises(Invalid, match="ep-made-up"):
        c.verify(d.id, d.roles["verifier"], {**vote(), "weight_request": made_up})


def test_nobody_sets_its_own_weights_by_writing_the_history(c: Consensus) -> None:
    """The attack: aria opens a proposal naming itself integrator, records an episode
    approving its own weight, and appends the matching history line (the file is
    group-writable). Every record is aria's own file, so only the rule stops it."""
    before = c.weights.current("aria")["exploration"]
    pid = c.threads.open({"task": "t", "requested_by": "aria", "source": {},
                          "roles": {"executor": "opus", "verifier": "mira",
                                    "integrator": "aria"}}, "prop-20260101T000000-abcd")
    adj = {"citizen": "aria", "value": "exploration", "delta": 0.1}
    c.threads.write(pid, "episode.json", "aria", {"weight_adjustments": [adj]})
    c.weights.history_path.parent.mkdir(parents=True, exist_ok=True)
    with c.weights.history_path.open("a") as fh:
        fh.write(json.dumps({**adj, "episodes": ["ep-20260101T000000-abcd"],
                             "approved_by": "aria"}) + "\n")
    assert c.weights.current("aria")["exploration"] == pytest.approx(before)


def test_every_tenth_proposal_weighs_with_mirrored_weights(c: Consensus) -> None:
    for n in range(EXPERIMENT_EVERY):
        c.request(f"{HELLO} #{n}", "opus", "operator")
    loaded = [c.load(p) for p in c.ids()]  # by place: the commons' order of proposals
    assert [d.experimental for d in loaded] == [n == EXPERIMENT_AT
                                                for n in range(EXPERIMENT_EVERY)]
    d = loaded[EXPERIMENT_AT]
    assert not d.red_team  # never on a red-team round
    verifier = d.roles["verifier"]
    now = c.weights.current(verifier)
    mirrored = c.weights_in(d, verifier)
    bounds = c.framework.bounds[c.weights.profile(verifier)]
    assert mirrored == counter(c.framework, c.weights.profile(verifier), now) != now
    assert all(bounds[v][0] <= w <= bounds[v][1] for v, w in mirrored.items())
    assert c.weights_in(loaded[0], verifier) == now
    assert c.weights.history() == []  # nothing of the history moves
