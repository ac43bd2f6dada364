"""The seed's Quality Rubric, scored mechanically from a decided proposal's records.

"Correctness, safety, coherence, maintainability, efficiency: score each 0-5, weight
equally, compare across proposals." The seed is silent on how; here each score is a
count of facts the records hold, so two readers of the same records get the same score
and no model's opinion of itself enters it. Like every emergence measure it is taken
after the fact and never shown to a citizen (they optimise for values, not for this).

Only executed proposals are scored. The seed's rubric is "for outcome comparison" and a
proposal rejected before it ran has no outcome: its correctness, safety and efficiency
would be guesses, and scoring only its plan (coherence, maintainability) would put plans
and outcomes into one mean. So a rejection before execution is unscored (`score` returns
None) and counted apart in the report. A failed execution is scored: it ran, and its
outcome was a failure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from shared.consensus.rules import APPROVING, MAX_ACTIONS, Proposal

DIMENSIONS = ("correctness", "safety", "coherence", "maintainability", "efficiency")
TOP = 5
# Rounds a proposal may take before efficiency counts them as waste: the seed's
# failure mode 2 targets "< 2 rounds for low stakes, < 4 for medium"; it names no
# target for high stakes, which get medium's (they are reviewed at least as closely).
ROUND_ALLOWANCE = {"low": 1, "medium": 3, "high": 3}
SMALL_CHANGE = MAX_ACTIONS // 2  # actions a reader can take in as one change
FILE_TOOLS = ("write_file", "append_file", "edit_file", "delete_file")


def score(d: Proposal) -> dict[str, float] | None:
    """The five scores and their equal-weight mean, or None for a proposal never executed."""
    if d.execution is None or not d.revisions:
        return None
    scores: dict[str, float] = {
        "correctness": correctness(d), "safety": safety(d), "coherence": coherence(d),
        "maintainability": maintainability(d), "efficiency": efficiency(d)}
    scores["overall"] = round(statistics.fmean(scores[k] for k in DIMENSIONS), 2)
    return scores


def _clamp(x: float) -> float:
    return float(max(0, min(TOP, x)))


def correctness(d: Proposal) -> float:
    """Does it work? From the execution and the verifier's outcome check.

    0  an action failed (the execution stopped; nothing was committed);
    1  it ran, but the outcomes were not verified and under half the mechanical checks met;
    2  it ran, not verified, but at least half the mechanical checks met (partly right);
    4  verified, but only by the verifier's word (no action a mechanical check covers,
       e.g. only shell commands);
    5  verified by the verifier and by every mechanical check (at least one).
    """
    if not (d.execution or {}).get("success"):
        return 0.0
    outcome = d.outcome or {}
    checks = list(outcome.get("mechanical") or [])
    met = sum(1 for c in checks if c.get("met"))
    if outcome.get("outcomes_verified"):
        return 5.0 if checks and met == len(checks) else 4.0
    return 2.0 if checks and met * 2 >= len(checks) else 1.0


def touched(action: Mapping[str, Any]) -> str:
    """The path an action changes, or the command it runs."""
    args = action.get("args") or {}
    return str(args.get("path") or args.get("command") or "")


def safety(d: Proposal) -> float:
    """No unintended consequences. Starts at 5; off it:

    -3 outcomes unverified and NOT undone (the revert failed, or nothing was committed to
       revert): the world holds a change nobody vouches for;
    -1 outcomes unverified but reverted: the unvouched change stood in the world for a time;
    -1 an action failed: the tree was discarded, but what a command did outside it stays;
    -1 an action changes a file that no expected outcome names: an effect nobody
       predicted is the mechanical trace of an unintended consequence. (Commands are left
       out: their effects have no path to compare; correctness already marks outcomes
       only the verifier's word vouches for.)
    Stakes themselves cost nothing: a high-stakes change done right, with a person's
    approval, is not unsafe, and penalising it would score the task, not the proposal.
    """
    s = TOP
    outcome = d.outcome
    if not (d.execution or {}).get("success"):
        s -= 1
    elif outcome is not None and not outcome.get("outcomes_verified"):
        s -= 1 if outcome.get("reverted") else 3
    last = d.revisions[-1]
    expected = " ".join(str(x) for x in last.get("expected_outcomes") or [])
    paths = [str((a.get("args") or {}).get("path") or "") for a in last.get("actions") or []
             if a.get("tool") in FILE_TOOLS]
    if any(p and p not in expected for p in paths):
        s -= 1
    return _clamp(s)


def coherence(d: Proposal) -> float:
    """Aligns with the existing architecture: the integrator is the role that judges this.

    2  to start;
    +2 the integrator approved the revision that ran (not overruled by tiebreak or person);
    +1 its coherence check says the change aligns with history, -2 if it says it does not
       (no check recorded: no change either way);
    +1 the change builds on collective memory: the revision cites an episode, or the
       integrator names relevant episodes.
    """
    last = d.revisions[-1]
    integ: Mapping[str, Any] = d.integrations.get(d.round) or {}
    check = integ.get("coherence_check") or {}
    s = 2
    if integ.get("decision") == "approve":
        s += 2
    aligns = check.get("aligns_with_history") if isinstance(check, Mapping) else None
    s += 1 if aligns is True else -2 if aligns is False else 0
    if last.get("cites") or (isinstance(check, Mapping) and check.get("relevant_episodes")):
        s += 1
    return _clamp(s)


def maintainability(d: Proposal) -> float:
    """Future agents can understand it: one point for each trace a later reader finds.

    +1 a commit in the world repository (its message names the proposal and the votes);
    +1 the revision that ran states its risks (risk_assessment);
    +1 the episode records at least one key learning;
    +1 every round's concerns or rejection were answered by the next revision's
       response_to_concerns (true when nothing needed answering);
    +1 a small change: at most SMALL_CHANGE actions, reviewable as one unit.
    """
    last = d.revisions[-1]
    s = 0
    s += bool((d.execution or {}).get("commit"))
    s += bool(last.get("risk_assessment"))
    s += bool((d.episode or {}).get("key_learnings"))
    s += all(str(d.revisions[r].get("response_to_concerns", "")).strip()
             for r in range(1, d.round) if _objected(d, r))
    s += len(last.get("actions") or []) <= SMALL_CHANGE
    return float(s)


def _objected(d: Proposal, r: int) -> bool:
    """Round `r`'s reviewers raised something the next revision owes an answer to."""
    ver: Mapping[str, Any] = d.verifications.get(r) or {}
    integ: Mapping[str, Any] = d.integrations.get(r) or {}
    return bool(ver.get("concerns") or ver.get("decision") not in (*APPROVING, None)
                or integ.get("decision") not in ("approve", None))


def efficiency(d: Proposal) -> float:
    """Reasonable resource use (model calls, people's time, work thrown away). From 5:

    -1 per round past the stakes' allowance (ROUND_ALLOWANCE: the seed's round targets);
    -1 a person had to decide though the stakes did not require one (an escalation, a
       contested tiebreak, the round cap): a person's time is the dearest resource;
    -1 the work was thrown away: the execution failed, or its commit was reverted.
    """
    s = TOP - max(0, d.round - ROUND_ALLOWANCE.get(d.stakes, 3))
    if d.human is not None and d.stakes != "high":
        s -= 1
    if not (d.execution or {}).get("success") or (d.outcome or {}).get("reverted"):
        s -= 1
    return _clamp(s)


def means(scored: Sequence[Mapping[str, float]]) -> dict[str, float] | None:
    """Each dimension's mean and the overall mean over scored proposals (None: none)."""
    if not scored:
        return None
    return {k: round(statistics.fmean(s[k] for s in scored), 2) for k in (*DIMENSIONS,
                                                                          "overall")}

