"""The Thought World's consensus rules, pure: a proposal's state from its records in memory.

A proposal is the records of one thread (see `store`): the request, each revision by
the executor, the verifier's and integrator's votes on it, an operator's decision,
the execution, the outcome check and the episode. `derive` works out from them, with
no I/O, which step is owed by whom, the stakes, whether the threshold is met, and the
conflict ladder (discussion, compromise, value-weighted tiebreak, a human).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from shared.consensus import calls, stakes
from shared.consensus.weighing import alignment, best_weights
from shared.errors import Invalid

__all__ = ["APPROVING", "INTEGRATE_DECISIONS", "MAX_ACTIONS", "MAX_ROUNDS", "OWNER", "ROLES",
           "STATES", "VERIFY_DECISIONS", "Proposal", "Vote", "derive", "proposal_problem",
           "red_team", "rotation"]

ROLES = ("executor", "verifier", "integrator")
APPROVING = ("approve", "approve_with_concerns")
VERIFY_DECISIONS = ("approve", "approve_with_concerns", "reject")
INTEGRATE_DECISIONS = ("approve", "reject", "propose_compromise", "escalate_to_human")
DISCUSSION_ROUNDS = 3  # ladder level 1: rounds of discussion before a compromise
COMPROMISE_ROUND = DISCUSSION_ROUNDS + 1  # level 2: one round on the integrator's compromise
MAX_ROUNDS = 10  # the seed's hard stop: past it, a human decides
CONTESTED_MARGIN = 0.1  # a tiebreak won by less than 10% is contested: a human decides
# The tiebreak counts at most this many values per holder (the reviewers' schemas allow
# three; the proposal's would allow all eight - capped alike, so citing more never pays).
MAX_CITED = 3
# The seed's groupthink mitigation: every Nth proposal of the commons (by its place among
# all proposals, oldest first) the verifier reviews as a red team: it must name how the
# proposal could fail or be gaming, whatever it decides.
RED_TEAM_EVERY = 5
MAX_ACTIONS = 4  # the proposal schema's maxItems too: one number, the model's and the rules'
STATES = ("pending", "approved", "rejected")  # where a proposal's view lives
OWNER = {"propose": "executor", "revise": "executor", "execute": "executor",
         "verify": "verifier", "check": "verifier", "integrate": "integrator",
         "record": "integrator"}


class Vote(TypedDict, total=False):
    """A verifier's or integrator's record on one revision (as written by `store`)."""

    decision: str  # VERIFY_DECISIONS or INTEGRATE_DECISIONS
    rationale: str
    concerns: list[str]
    values: list[str]  # the values its position cites (for the tiebreak)
    compromise: str
    deterministic_flags: list[str]  # a verification's: the gaming flags it was shown
    red_team: bool  # a verification's: it had to review adversarially
    collusion_check: dict[str, Any]  # an integration's: {detected, explanation} (store)
    decision_asked: str  # an integration's decision before a detected collusion escalated it
    author: str
    ts: str


@dataclass
class Proposal:
    """Everything known about one proposal, derived from its records."""

    id: str
    request: dict[str, Any]
    revisions: list[dict[str, Any]] = field(default_factory=list)
    verifications: dict[int, Vote] = field(default_factory=dict)
    integrations: dict[int, Vote] = field(default_factory=dict)
    human: dict[str, Any] | None = None
    execution: dict[str, Any] | None = None
    outcome: dict[str, Any] | None = None
    episode: dict[str, Any] | None = None
    giveups: dict[int, dict[str, Any]] = field(default_factory=dict)
    phase: str = "propose"  # propose verify integrate revise human execute check record done
    result: str = ""  # approved | rejected, once known
    why: str = ""
    level: str = ""  # the conflict ladder level reached, if any
    stakes: str = "low"
    stakes_reasons: list[str] = field(default_factory=list)
    consensus: dict[str, Any] | None = None
    tiebreak: dict[str, Any] | None = None
    flags: list[str] = field(default_factory=list)  # the last revision's gaming flags
    round_flags: dict[int, list[str]] = field(default_factory=dict)  # each revision's
    blocked: set[int] = field(default_factory=set)  # rounds sent back for their flags
    escalation: str = ""  # why a person decides, once one must
    red_team: bool = False  # its verifier must review adversarially (`red_team`)
    experimental: bool = False  # weighed with counter-intuitive weights (`weighing.counter`)
    ignored: list[str] = field(default_factory=list)  # records set aside, why (the store logs)

    @property
    def roles(self) -> dict[str, str]:
        return dict(self.request.get("roles", {}))

    @property
    def round(self) -> int:
        return len(self.revisions)

    @property
    def owed_by(self) -> str:
        """Who owes the next step: a citizen, "operator", or "" when nothing is owed."""
        if self.phase == "human":
            return "operator"
        role = OWNER.get(self.phase)
        return self.roles.get(role, "") if role else ""

    @property
    def state(self) -> str:
        return self.result if self.phase == "done" else "pending"

    @property
    def calls(self) -> float:
        """The model calls its task has made: the chain's steps before it and its own."""
        return calls.total(self.request, [*self.revisions, *self.verifications.values(),
                                          *self.integrations.values(), self.outcome,
                                          self.episode, *self.giveups.values()])


def red_team(place: int) -> bool:
    """Whether the proposal at `place` (0 for the commons' first) gets a red-team review:
    every RED_TEAM_EVERYth, so no run of proposals escapes one."""
    return place % RED_TEAM_EVERY == RED_TEAM_EVERY - 1


def rotation(pid: str, executor: str, citizens: Iterable[str]) -> dict[str, str]:
    """Roles by rotation: the verifier and integrator are two other citizens, picked by
    the proposal id, so the burden spreads and nobody reviews its own proposal."""
    others = sorted(c for c in set(citizens) if c != executor)
    if len(others) < 2:
        raise Invalid(f"consensus needs two citizens besides {executor} "
                      f"(found {', '.join(others) or 'none'})")
    k = int(hashlib.sha256(pid.encode()).hexdigest(), 16) % len(others)
    return {"executor": executor, "verifier": others[k],
            "integrator": others[(k + 1) % len(others)]}


def _tally(d: Proposal, r: int) -> tuple[int, dict[str, str]]:
    ver, integ = d.verifications[r], d.integrations[r]
    positions = {d.roles["executor"]: "approve",
                 d.roles["verifier"]: "approve" if ver["decision"] in APPROVING else "reject",
                 d.roles["integrator"]: "approve" if integ["decision"] == "approve" else "reject"}
    return sum(p == "approve" for p in positions.values()), positions


def _tiebreak(d: Proposal, weights: Mapping[str, Mapping[str, float]] | None,
              positions: Mapping[str, str]) -> dict[str, Any]:
    """Level 3: the position whose cited values weigh most wins - compared on a measure
    citing more cannot inflate. Each holder counts its first MAX_CITED values; each side
    is scored on the mean of its k heaviest, with k the same for both sides (the fewer
    either side cites). Summing instead (the seed's example) let a proposer citing all
    eight values outweigh two reviewers capped at three each."""
    r = d.round
    cited = {d.roles["executor"]: list(d.revisions[-1].get("value_justification", {})),
             d.roles["verifier"]: list(d.verifications[r].get("values", [])),
             d.roles["integrator"]: list(d.integrations[r].get("values", []))}
    w = weights or {}
    best = {}
    for side in ("approve", "reject"):
        holders = {c: list(dict.fromkeys(str(v) for v in values))[:MAX_CITED]
                   for c, values in cited.items() if positions[c] == side}
        best[side] = best_weights({c: w.get(c, {}) for c in holders}, holders)
    k = min(MAX_CITED, *(len(b) for b in best.values()))
    sides = {side: alignment(b, k) for side, b in best.items()}
    top = max(sides.values())
    contested = top == 0 or abs(sides["approve"] - sides["reject"]) <= CONTESTED_MARGIN * top
    winner = "" if contested else max(sides, key=lambda s: sides[s])
    return {"scores": sides, "values_compared": k, "winner": winner, "contested": contested}


def derive(d: Proposal, weights: Mapping[str, Mapping[str, float]] | None = None,
           medium: frozenset[str] = frozenset()) -> Proposal:
    """Work out the phase, stakes, consensus and result of a proposal from its records.

    Rounds are taken in order; a revision counts only if the round before it ended in
    a call to revise, so a revision written out of turn (after a vote, or after an
    approval) is ignored rather than swapping the actions that were voted on.
    `d.round_flags` holds each revision's gaming flags (computed by the reader, which
    sees the other proposals); `medium`, the operator's medium programs.
    """
    revisions, d.revisions = list(d.revisions), []
    # Everything below is derived, never carried over: deriving the same proposal again
    # after more records arrive must not keep a result an earlier derivation reached.
    d.phase, d.blocked, d.result, d.why = "propose", set(), "", ""
    for rev in revisions:
        d.revisions.append(rev)
        d.level, d.tiebreak, d.consensus, d.escalation = "", None, None, ""
        _evaluate(d, weights, medium)
        if d.phase != "revise":
            break
    _give_up(d)
    _call_cap(d)
    if d.human and d.human.get("decision") == "reject" and d.execution is None:
        _finish(d, "rejected", f"rejected by {d.human.get('operator')}: "
                f"{d.human.get('why', '')}")
    return d


def _give_up(d: Proposal) -> None:
    """A step's owner that could not take it (its model failed it repeatedly): a proposer
    withdraws; a reviewer hands the decision to a human."""
    g = d.giveups.get(d.round)
    if not g or g.get("phase") != d.phase:
        return
    what = f"{g['author']} could not {d.phase}: {str(g.get('why', ''))[:300]}"
    if d.phase in ("propose", "revise"):
        _finish(d, "rejected", f"withdrawn - {what}")
    elif d.human and d.human.get("decision") == "approve":
        d.level = "human"
        _after_approval(d)
    else:
        d.level, d.phase, d.why = "human", "human", f"{what}; a human decides"


def _call_cap(d: Proposal) -> None:
    """The seed's cap on a task's calls (`shared.consensus.calls`): a proposal still being
    decided whose task has made that many waits for a person, who approves (its last
    revision runs) or rejects it; one already decided finishes its few steps."""
    why = calls.over(d.calls)
    if not why or not d.revisions or d.phase not in ("verify", "integrate", "revise"):
        return
    if d.human and d.human.get("decision") == "approve":
        d.level = "human"
        _after_approval(d)
        return
    d.level, d.escalation, d.phase = "human", why, "human"
    d.why = f"escalated to a human ({why})"


def _evaluate(d: Proposal, weights: Mapping[str, Mapping[str, float]] | None,
              medium: frozenset[str]) -> None:
    """The state after the last revision in `d.revisions`."""
    d.stakes, d.stakes_reasons = stakes.classify(d.revisions[-1].get("actions", []), medium)
    if len(set(d.roles.values())) != len(ROLES):  # nobody reviews its own proposal
        d.phase, d.level, d.why = "human", "human", "the roles are not three citizens"
        return
    r = d.round
    if r not in d.verifications:
        d.phase = "verify"
        return
    if r not in d.integrations:
        d.phase = "integrate"
        return
    approvals, positions = _tally(d, r)
    decided = _ladder(d, weights, approvals, positions)
    d.consensus = {"reached": decided in ("approved", "rejected"), "round": r,
                   "threshold": stakes.THRESHOLDS[d.stakes], "stakes": d.stakes,
                   "approvals": approvals, "voters": len(positions), "positions": positions,
                   "result": decided or "discussing", "level": d.level or "vote",
                   "timestamp": d.integrations[r].get("ts")}
    if decided == "rejected":
        _finish(d, "rejected", f"rejected in round {r} ({d.level or 'vote'})")
    elif decided:
        _decided(d, decided)


def _ladder(d: Proposal,  # noqa: PLR0911 - one return per rung of the ladder
            weights: Mapping[str, Mapping[str, float]] | None, approvals: int,
            positions: dict[str, str]) -> str:
    """The round's result on the conflict ladder: "approved", "rejected", "human", or ""
    while the discussion goes on (then `d.phase` is "revise")."""
    r, integ = d.round, d.integrations[d.round]
    flags = d.round_flags.get(r, [])
    if integ["decision"] == "escalate_to_human" or r >= MAX_ROUNDS:
        return _escalate(d, "by the integrator, or too many rounds")
    if flags and d.stakes == "high":  # the seed's gaming detection escalates
        return _escalate(d, "gaming flags on a high-stakes proposal: " + "; ".join(flags[:3]))
    if stakes.threshold_met(d.stakes, approvals, len(positions)):
        if flags and d.stakes == "medium" and not _answered(d, r):
            # A flagged medium proposal waits for its proposer to answer the flags in a
            # revision (`response_to_concerns`), which the reviewers then judge.
            d.blocked.add(r)
            d.level, d.phase = "gaming", "revise"
            return ""
        return "approved"
    if r < DISCUSSION_ROUNDS:
        d.level, d.phase = "discussion", "revise"
        return ""
    if r == DISCUSSION_ROUNDS and integ.get("compromise"):
        d.level, d.phase = "compromise", "revise"
        return ""
    if d.stakes != "low":  # the seed's table: medium with dissent, and high, need a person
        return _escalate(d, f"{d.stakes} stakes with dissent after discussion")
    d.level = "tiebreak"
    d.tiebreak = _tiebreak(d, weights, positions)
    if d.tiebreak["contested"]:
        return _escalate(d, "tiebreak contested")
    return "approved" if d.tiebreak["winner"] == "approve" else "rejected"


def _escalate(d: Proposal, why: str) -> str:
    d.level, d.escalation = "human", why
    return "human"


MIN_ANSWER = 40  # characters: "." answers nothing (found by an adversarial review)


def _answered(d: Proposal, r: int) -> bool:
    """Revision `r` answers the gaming flags that sent revision r-1 back: it says why
    (at least MIN_ANSWER characters) and raises no flag the round before did not - a
    new flag is a new question, not an answered one."""
    answer = str(d.revisions[r - 1].get("response_to_concerns", "")).strip()
    return (r - 1) in d.blocked and len(answer) >= MIN_ANSWER and set(
        d.round_flags.get(r, [])) <= set(d.round_flags.get(r - 1, []))


def _decided(d: Proposal, decided: str) -> None:
    """Approved, or for a human: high stakes and escalations wait for a person."""
    human_ok = bool(d.human and d.human.get("decision") == "approve")
    if (decided == "human" or d.stakes == "high") and not human_ok:
        d.phase = "human"
        d.why = ("high stakes: a human must approve" if decided != "human" else
                 f"escalated to a human ({d.escalation})")
        return
    _after_approval(d)


def _after_approval(d: Proposal) -> Proposal:
    if d.execution is not None and d.execution.get("round") != d.round:
        d.ignored.append(f"ignoring the execution record of {d.id}: it is for round "
                         f"{d.execution.get('round')}, not {d.round}")
        d.execution = None
    if d.execution is None:
        d.phase = "execute"
        return d
    if not d.execution.get("success"):
        return _finish(d, "rejected", "execution failed: " + str(d.execution.get("error", "")))
    if d.outcome is None:
        d.phase = "check"
        return d
    if not d.outcome.get("outcomes_verified"):
        undone = ("reverted" if d.outcome.get("reverted") else
                  f"NOT reverted: {d.outcome.get('revert_error') or 'nothing was committed'}")
        return _finish(d, "rejected", f"the expected outcomes were not verified ({undone})")
    return _finish(d, "approved", "executed and verified")


def _finish(d: Proposal, result: str, why: str) -> Proposal:
    d.result, d.why = result, why
    d.phase = "done" if d.episode is not None else "record"
    return d



def proposal_problem(body: Mapping[str, Any]) -> str:  # noqa: PLR0911 - one per rule
    """What is wrong with a proposal body, or "" when it is well-formed."""
    if not str(body.get("goal", "")).strip():
        return "a proposal needs a goal"
    actions = body.get("actions")
    if not isinstance(actions, list) or not actions:
        return "a proposal needs at least one action"
    if len(actions) > MAX_ACTIONS:
        return f"at most {MAX_ACTIONS} actions per proposal (split the work)"
    for a in actions:
        if not isinstance(a, Mapping) or not isinstance(a.get("args", {}), Mapping):
            return "each action is {\"tool\": …, \"args\": {…}}"
    if not isinstance(body.get("value_justification", {}), Mapping):
        return "value_justification maps values to reasons"
    if not body.get("expected_outcomes"):
        return "a proposal needs falsifiable expected outcomes"
    return ""

