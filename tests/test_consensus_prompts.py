"""What each Thought World role is shown and which model seat it uses - the seed's rules
that had no test: the model tier of a vote (by stakes), relevant episodes (searched, not
the latest), and sequential isolation (the verifier never sees the integrator)."""

from __future__ import annotations

import json
from pathlib import Path

from citizen import civilization, config
from citizen.wake.flow import run_wake
from shared.consensus import Consensus
from shared.consensus.episodes import SHOWN
from tests.thoughtworld import HELLO, council_provider, proposal, vote

OPINION = "INTEGRATOR-OPINION-7f3a: the greeting should be in French"


def commons() -> Consensus:
    return civilization.consensus(config.templates())


def prompts(provider: object) -> str:
    return json.dumps([r.messages for r in provider.requests])  # type: ignore[attr-defined]


def test_the_seat_a_vote_uses_is_set_by_its_stakes_not_its_role(civ: Path) -> None:
    """A deliberate change from the seed (verifier Haiku, executor and integrator Sonnet):
    the verifier votes on the fast seat, but on the primary one for high stakes; the
    executor and the integrator use the primary seat."""
    c = commons()
    medium = c.request(HELLO, "opus", "operator").id
    c.propose(medium, "opus", proposal())
    high = c.request(HELLO, "opus", "operator").id
    c.propose(high, "opus", proposal(tool="run", content="rm -rf build"))
    assert (c.load(medium).stakes, c.load(high).stakes) == ("medium", "high")
    provider = council_provider()
    for _ in range(2):  # both reviewers' wakes, twice: every verify and integrate step
        for reviewer in ("mira", "aria"):
            run_wake(reviewer, wake_type="CONSENSUS", provider=lambda cfg, s: provider)
    tiers = {(pid, r.purpose): r.tier for r in provider.requests for pid in (medium, high)
             if f"for proposal {pid}." in json.dumps(r.messages)}
    assert tiers[(medium, "consensus_verify")] == "fast"
    assert tiers[(high, "consensus_verify")] == "primary"
    assert tiers[(medium, "consensus_integrate")] == "primary"
    assert tiers[(high, "consensus_integrate")] == "primary"


def test_a_prompt_gets_the_relevant_episodes_not_the_latest(civ: Path) -> None:
    c = commons()
    c.episodes.add({"id": "ep-greeting", "goal": "Create hello.md with a greeting",
                    "outcome": "success", "key_learnings": ["name the file in the outcome"]})
    for i in range(5):  # newer, and about something else entirely
        c.episodes.add({"id": f"ep-vacuum-{i}", "goal": f"Vacuum sqlite database {i}",
                        "outcome": "success", "key_learnings": ["run it at night"]})
    c.request(HELLO, "opus", "operator")
    provider = council_provider()
    run_wake("opus", wake_type="CONSENSUS", provider=lambda cfg, s: provider)
    (propose,) = [r for r in provider.requests if r.purpose == "consensus_propose"]
    shown = json.dumps(propose.messages)
    assert "ep-greeting" in shown
    assert not any(f"ep-vacuum-{i}" in shown for i in range(5))


def test_a_prompt_shows_the_seeds_five_episodes(civ: Path) -> None:
    assert SHOWN == 5
    c = commons()
    for i in range(7):
        c.episodes.add({"id": f"ep-greeting-{i}", "goal": f"Create hello{i}.md with a greeting",
                        "outcome": "success", "key_learnings": ["name the file"]})
    c.request(HELLO, "opus", "operator")
    provider = council_provider()
    run_wake("opus", wake_type="CONSENSUS", provider=lambda cfg, s: provider)
    (propose,) = [r for r in provider.requests if r.purpose == "consensus_propose"]
    shown = json.dumps(propose.messages)
    assert sum(f"ep-greeting-{i}" in shown for i in range(7)) == 5


def test_the_verifier_never_sees_the_integrators_opinion(civ: Path) -> None:
    """Sequential isolation (the seed's groupthink mitigation): in round 2 the verifier
    sees the revision and its own earlier vote, not what the integrator said in round 1."""
    c = commons()
    pid = c.request(HELLO, "opus", "operator").id
    c.propose(pid, "opus", proposal())
    roles = c.load(pid).roles
    c.verify(pid, roles["verifier"], vote("approve_with_concerns", "check hello.md first"))
    c.integrate(pid, roles["integrator"], {**vote("reject"), "rationale": OPINION})
    assert c.load(pid).phase == "revise"
    c.propose(pid, "opus", {**proposal(), "response_to_concerns": "hello.md is checked"})
    provider = council_provider()
    run_wake(roles["verifier"], wake_type="CONSENSUS", provider=lambda cfg, s: provider)
    (verify,) = [r for r in provider.requests if r.purpose == "consensus_verify"]
    shown = prompts(provider)
    assert "check hello.md first" in shown  # its own earlier vote: the prompt is the real one
    assert "INTEGRATOR-OPINION-7f3a" not in shown and verify.tier == "fast"
