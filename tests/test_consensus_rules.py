"""The consensus rules, pure and in memory: a hypothesis state machine appends random
records to one proposal - votes, revisions, give-ups, human decisions, executions,
outcome checks, out of turn as often as in turn - and re-derives it after each, with
no file, lock or git in the way (tests/test_consensus_integrity.py drives the store).

The checks are the seed's table, written out here rather than taken from the code:
nothing runs without its threshold, its tiebreak or a human; high stakes never run
without a human; a rejection by a human before execution sticks.
"""

from __future__ import annotations

from typing import Any, cast

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shared.consensus import MAX_ROUNDS, Proposal, Vote, derive
from tests.thoughtworld import assert_allowed_to_run, proposal, vote

ROLES = {"executor": "opus", "verifier": "mira", "integrator": "aria"}
ACTIONS = {"low": ("read_file", "README.md"), "medium": ("write_file", "w.md"),
           "high": ("delete_file", "README.md")}
ANSWER = "each flag is answered here: the change is exactly what the task asks"
VALUES = ("truth", "safety", "efficiency", "coherence", "exploration", "autonomy",
          "cooperation", "transparency")
# The templates' starting weights (opus executor, mira verifier, aria integrator), so a
# tiebreak can be won as well as contested.
WEIGHTS = {"opus": dict(zip(VALUES, (0.9, 0.6, 0.75, 0.6, 0.8, 0.6, 0.7, 0.85), strict=True)),
           "mira": dict(zip(VALUES, (1.0, 0.9, 0.5, 0.7, 0.4, 0.7, 0.6, 0.85), strict=True)),
           "aria": dict(zip(VALUES, (0.9, 0.75, 0.6, 0.85, 0.6, 0.5, 0.85, 0.9), strict=True))}


class RulesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.d = Proposal("prop-00000000T000000-0000", {"task": "t", "roles": ROLES})
        self.ran_at: str = ""  # the phase and level the proposal was in when it ran

    def _derive(self) -> Proposal:
        return derive(self.d, WEIGHTS)

    def _owed(self, *phases: str) -> bool:
        return self._derive().phase in phases

    # ------------------------------------------------------------ records

    @rule(kind=st.sampled_from(list(ACTIONS)), in_turn=st.booleans(),
          cited=st.lists(st.sampled_from(VALUES), max_size=8, unique=True),
          flagged=st.booleans(), answer=st.booleans())
    def revise(self, kind: str, in_turn: bool, cited: list[str], flagged: bool,
               answer: bool) -> None:
        """The proposer games at will: cites any number of values (all eight included),
        carries gaming flags or not, answers them or not."""
        if in_turn and not self._owed("propose", "revise"):
            return
        tool, path = ACTIONS[kind]
        if len(self.d.revisions) < MAX_ROUNDS:
            body = proposal(path=path, tool=tool,
                            value_justification={v: f"serves {v}" for v in cited},
                            response_to_concerns=ANSWER if answer else "")
            r = len(self.d.revisions) + 1
            self.d.revisions.append({**body, "round": r})
            self.d.round_flags[r] = ["generic justification"] if flagged else []

    @rule(decision=st.sampled_from(("approve", "approve_with_concerns", "reject")),
          values=st.lists(st.sampled_from(VALUES), max_size=8), in_turn=st.booleans())
    def verify(self, decision: str, values: list[str], in_turn: bool) -> None:
        if self.d.revisions and (not in_turn or self._owed("verify")):
            self.d.verifications.setdefault(self.d.round, cast(Vote, {
                **vote(decision, values=tuple(values)), "author": ROLES["verifier"]}))

    @rule(decision=st.sampled_from(("approve", "reject", "propose_compromise",
                                    "escalate_to_human")),
          compromise=st.booleans(), values=st.lists(st.sampled_from(VALUES), max_size=8))
    def integrate(self, decision: str, compromise: bool, values: list[str]) -> None:
        if self._owed("integrate"):
            body: dict[str, Any] = {**vote(decision, values=tuple(values)),
                                    "author": ROLES["integrator"]}
            if compromise:
                body["compromise"] = {"proposed_changes": "smaller"}
            self.d.integrations[self.d.round] = cast(Vote, body)

    @rule(decision=st.sampled_from(("approve", "reject")))
    def human(self, decision: str) -> None:
        d = self._derive()
        if self.d.human is None and self.d.execution is None and (
                decision == "reject" or d.phase == "human"):
            self.d.human = {"operator": "root", "decision": decision}

    @rule(success=st.booleans())
    def execute(self, success: bool) -> None:
        d = self._derive()
        if d.phase == "execute" and self.d.execution is None:
            self.ran_at = f"{d.stakes}/{d.level or 'vote'}"
            assert_allowed_to_run(d)
            self.d.execution = {"round": d.round, "success": success,
                                "author": ROLES["executor"]}

    @rule(ok=st.booleans())
    def check(self, ok: bool) -> None:
        if self._owed("check"):
            self.d.outcome = {"outcomes_verified": ok, "author": ROLES["verifier"]}

    @rule()
    def give_up(self) -> None:
        d = self._derive()
        if d.phase in ("propose", "revise", "verify", "integrate"):
            self.d.giveups.setdefault(d.round, {"phase": d.phase, "author": d.owed_by})

    @rule()
    def record(self) -> None:
        if self._owed("record"):
            self.d.episode = {"id": "ep", "author": ROLES["integrator"]}

    # ------------------------------------------------------------ the rules

    @invariant()
    def the_rules_hold(self) -> None:
        d = self._derive()
        assert d.phase in ("propose", "verify", "integrate", "revise", "human", "execute",
                           "check", "record", "done"), d.phase
        assert d.round <= MAX_ROUNDS
        if d.human and d.human["decision"] == "reject" and d.execution is None:
            assert d.result == "rejected", "a person's rejection before execution is final"
        if d.result == "approved":
            assert d.execution and d.execution["success"] and d.outcome \
                and d.outcome["outcomes_verified"], "approved without a verified execution"
        if d.phase == "execute":  # whatever it took to get here must have been allowed
            assert_allowed_to_run(d)
        owner = {"propose": "executor", "revise": "executor", "execute": "executor",
                 "verify": "verifier", "check": "verifier", "integrate": "integrator",
                 "record": "integrator"}.get(d.phase)
        assert d.owed_by == (ROLES[owner] if owner else
                             "operator" if d.phase == "human" else ""), (d.phase, d.owed_by)


RulesMachine.TestCase.settings = settings(
    max_examples=400, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestConsensusRules = RulesMachine.TestCase


def test_the_rules_machine_reaches_execution_and_a_human() -> None:
    """Not vacuous: in-turn steps take a medium proposal to execution, and a high one to a
    person first."""
    for kind, expect in (("medium", "execute"), ("high", "human")):
        m = RulesMachine()
        m.revise(kind, in_turn=True, cited=["truth"], flagged=False, answer=False)
        m.verify("approve", ["truth"], in_turn=True)
        m.integrate("approve", compromise=False, values=["truth"])
        assert m._derive().phase == expect
        m.the_rules_hold()


def test_deriving_again_keeps_no_result_an_earlier_derivation_reached() -> None:
    """Found by the machine above: a proposal a person approved ran, and its outcome was
    verified ("approved"); late votes sent it to a new round, whose verifier gave up.
    The stale execution is set aside for the new round - yet the old "approved" stayed,
    because `derive` kept the result of the derivation before."""
    m = RulesMachine()
    m.revise("low", in_turn=False, cited=[], flagged=False, answer=False)
    m.give_up()
    m.human("approve")
    m.execute(success=True)
    m.check(ok=True)
    assert m._derive().result == "approved"
    m.verify("reject", [], in_turn=False)
    m.integrate("reject", compromise=False, values=[])
    m.revise("low", in_turn=False, cited=[], flagged=False, answer=False)
    m.give_up()
    d = m._derive()
    assert d.result != "approved" and d.execution is None and d.phase == "execute"
    m.the_rules_hold()
