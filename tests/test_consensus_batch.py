"""Low-stakes reviews batched (the Thought World seed's "Batch operations: combine multiple
low-stakes proposals into one review"): a verifier owing several low-stakes verifications
reviews them in one model call, each verdict still its proposal's own vote file; a
medium- or high-stakes review always has a call of its own."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from citizen import civilization, config
from citizen.llm.base import Request
from citizen.llm.scripted import ScriptedProvider
from citizen.wake.flow import run_wake
from shared.consensus import Consensus, rotation
from tests.scripts import say
from tests.thoughtworld import CITIZENS, COUNCIL, HELLO, proposal

READ = {"tool": "read_file", "args": {"path": "README.md"}}


def commons() -> Consensus:
    return civilization.consensus(config.templates())


def low_stakes() -> dict[str, object]:
    return {**proposal(), "actions": [READ],
            "expected_outcomes": ["README.md is read and its first line reported"]}


def reviewed_by(verifier: str, n: int) -> list[str]:
    """`n` proposal ids whose rotation makes `verifier` the reviewer of opus's proposal."""
    ids = (f"prop-20990101T0000{i:02d}-{i:04x}" for i in range(1, 200))
    return [p for p in ids if rotation(p, "opus", CITIZENS)["verifier"] == verifier][:n]


def council() -> ScriptedProvider:
    """COUNCIL's answers, and for a batch one approving verdict per proposal it names."""
    def answer(request: Request) -> object:
        if request.purpose == "consensus_verify_batch":
            assert request.output_schema is not None
            return say(json.dumps({pid: COUNCIL["consensus_verify"]
                                   for pid in request.output_schema["required"]}))
        return say(json.dumps(COUNCIL[request.purpose]))
    return ScriptedProvider(default=answer)  # type: ignore[arg-type]


def test_low_stakes_reviews_share_one_call_and_a_medium_one_has_its_own(civ: Path) -> None:
    c = commons()
    *lows, medium = reviewed_by("mira", 4)  # four proposals: no red-team place (the 5th)
    for pid in lows:
        c.request(HELLO, "opus", "operator", pid=pid)
        assert c.propose(pid, "opus", low_stakes()).stakes == "low"
    c.request(HELLO, "opus", "operator", pid=medium)
    assert c.propose(medium, "opus", proposal()).stakes == "medium"
    provider = council()
    result = run_wake("mira", wake_type="CONSENSUS", provider=lambda cfg, s: provider)
    purposes = Counter(r.purpose for r in provider.requests)
    # 4 reviews, 2 calls: the three low-stakes ones together, the medium one alone.
    assert result.status == "ok" and result.calls == 2
    assert purposes == {"consensus_verify_batch": 1, "consensus_verify": 1}
    (batch,) = [r for r in provider.requests if r.purpose == "consensus_verify_batch"]
    assert sorted(batch.output_schema["required"]) == sorted(lows)  # type: ignore[index]
    assert medium not in json.dumps(batch.messages)  # never batched, never shown
    after = commons()
    for pid in [*lows, medium]:
        d = after.load(pid)
        # each verdict is its proposal's own vote, recorded by the same rules
        assert d.phase == "integrate" and d.verifications[1]["author"] == "mira"
        assert (Path(after.records_dir) / pid / "verify-01.json").is_file()


def test_a_verdict_the_rules_refuse_costs_only_its_own_proposal(civ: Path) -> None:
    """A batch verdict is checked like any vote: a refused one leaves that proposal owed
    and the others voted."""
    c = commons()
    good, bad = reviewed_by("mira", 2)
    for pid in (good, bad):
        c.request(HELLO, "opus", "operator", pid=pid)
        c.propose(pid, "opus", low_stakes())

    def answer(request: Request) -> object:
        broken = {**COUNCIL["consensus_verify"],  # in the schema, refused by a rule (0)
                  "weight_request": {"value": "truth", "delta": 0, "reason": "more",
                                     "episodes": ["ep-x"]}}
        if request.purpose == "consensus_verify":  # alone, the next step: refused again
            return say(json.dumps(broken))
        return say(json.dumps({good: COUNCIL["consensus_verify"], bad: broken}))
    provider = ScriptedProvider(default=answer)  # type: ignore[arg-type]
    run_wake("mira", wake_type="CONSENSUS", provider=lambda cfg, s: provider)
    assert [r.purpose for r in provider.requests] == ["consensus_verify_batch",
                                                      "consensus_verify"]
    after = commons()
    assert after.load(good).phase == "integrate"
    assert after.load(bad).phase == "verify" and not after.load(bad).verifications
