"""Helpers for Thought World tests: a commons, well-formed steps, a scripted council."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from citizen.config import paths
from shared.consensus import Consensus, Proposal
from shared.consensus.values import load_framework

CITIZENS = ("opus", "mira", "aria")
PROFILES = {"opus": "executor", "mira": "verifier", "aria": "integrator"}
HELLO = "Create a file called hello.md with the text 'Hello, thought world!'"


def commons(shared: Path, citizens: tuple[str, ...] = CITIZENS) -> Consensus:
    for state in ("pending", "approved", "rejected"):
        (shared / "proposals" / state).mkdir(parents=True, exist_ok=True)
    framework = load_framework(paths.templates_dir() / "values.yaml")
    return Consensus(shared, framework, PROFILES, citizens, enforce_identity=False)


def proposal(path: str = "hello.md", content: str = "Hello, thought world!",
             tool: str = "write_file", **extra: Any) -> dict[str, Any]:
    args = {"path": path, "content": content} if tool != "run" else {"command": content}
    return {
        "goal": f"Create {path} with the greeting",
        "actions": [{"tool": tool, "args": args}],
        "value_justification": {
            "truth": f"{path} will hold exactly the text the task asks for, nothing more",
            "transparency": "the change is one commit whose message names this proposal"},
        "expected_outcomes": [f"{path} exists and contains '{content}'"],
        "risk_assessment": [{"risk": f"{path} may exist already", "mitigation":
                             "git keeps the old version; revert if needed", "severity": "low"}],
        **extra,
    }


def vote(decision: str = "approve", *concerns: str, values: tuple[str, ...] = ("truth",)
         ) -> dict[str, Any]:
    return {"decision": decision, "rationale": f"{decision}: reviewed against the checklist",
            "concerns": list(concerns), "values": list(values),
            "gaming_check": {"detected": False, "explanation": "specific justifications"}}


def scripted_council(body: dict[str, Any]) -> dict[str, Any] | None:  # noqa: PLR0911
    """The fake Messages API's answer to each consensus step (by the step's schema)."""
    from tests.anthropic_server import tool_use

    if (body.get("tool_choice") or {}).get("name") != "respond":
        return None
    props = body["tools"][-1]["input_schema"]["properties"]
    if "actions" in props:
        return tool_use("respond", proposal())
    if "gaming_check" in props:
        return tool_use("respond", vote("approve_with_concerns",
                                        "check that hello.md does not exist already"))
    if "coherence_check" in props:
        return tool_use("respond", {"decision": "approve", "values": ["coherence"],
                                    "rationale": "the concern is low severity: git can revert",
                                    "collusion_check": NO_COLLUSION})
    if "outcomes_verified" in props:
        return tool_use("respond", {"outcomes_verified": True,
                                    "rationale": "hello.md holds the greeting",
                                    "checks": [{"outcome": "hello.md exists", "met": True,
                                                "evidence": "mechanical check passed"}]})
    if "key_learnings" in props:
        return tool_use("respond", {"key_learnings": [
            "small documentation changes pass in one round when outcomes name the file"]})
    return None


NO_COLLUSION = {"detected": False, "explanation": "the verifier raised its own concern"}


def env() -> dict[str, str]:
    return dict(os.environ)


COUNCIL = {
    "consensus_propose": proposal(), "consensus_revise": proposal(),
    "consensus_verify": vote("approve_with_concerns", "check hello.md does not exist already"),
    "consensus_integrate": {"decision": "approve", "values": ["coherence"],
                            "rationale": "the concern is low severity: git can revert",
                            "collusion_check": NO_COLLUSION},
    "consensus_check": {"outcomes_verified": True, "rationale": "hello.md holds the greeting"},
    "consensus_record": {"key_learnings": ["small documentation changes pass in one round"]},
}


def council_provider() -> Any:
    """An in-process scripted provider answering each consensus step by its purpose."""
    import json

    from citizen.llm.scripted import ScriptedProvider
    from tests.scripts import say

    return ScriptedProvider(default=lambda request: say(json.dumps(COUNCIL[request.purpose])))


def assert_allowed_to_run(d: Proposal) -> None:
    """What let proposal `d` reach execution was allowed - the seed's table, written out
    here rather than taken from the code under test: its threshold, its tiebreak, or a
    person (always a person for high stakes, escalations and medium dissent)."""
    human_ok = bool(d.human and d.human["decision"] == "approve")
    if d.consensus is None:  # a reviewer gave up: only a human can have let it run
        assert human_ok and d.giveups, "ran with neither a consensus nor a human"
        return
    if d.stakes == "high" or d.consensus["level"] == "human":
        assert human_ok, "high stakes or an escalation ran without a human"
        return
    approvals = sum(p == "approve" for p in d.consensus["positions"].values())
    if d.stakes == "medium":
        # Unanimous, or a person: never the tiebreak (the seed: human approval if dissent).
        assert approvals == 3 or human_ok, f"medium stakes ran with {approvals} of 3"
        flags = d.round_flags.get(d.round)
        if flags and not human_ok:  # flags are answered by the proposer before it runs
            answer = str(d.revisions[-1].get("response_to_concerns", "")).strip()
            assert d.round > 1 and d.round_flags.get(d.round - 1) and answer, \
                f"a flagged medium proposal ran unanswered: {flags}"
    if d.consensus["level"] == "vote":
        needed = {"low": 2, "medium": 3}[d.stakes]
        assert approvals >= needed, f"{d.stakes} stakes ran with {approvals} of 3"
        assert d.verifications[d.round]["decision"] in ("approve", "approve_with_concerns") \
            or d.stakes == "low"
    elif d.consensus["level"] == "tiebreak":
        assert d.stakes == "low", f"a tiebreak decided {d.stakes} stakes"
        assert d.tiebreak is not None and d.tiebreak["winner"] == "approve"
