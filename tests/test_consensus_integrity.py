"""The consensus rules hold whatever the citizens do: a hypothesis state machine drives
random proposals, votes, revisions, human decisions, forged records and crashes from
adversarial citizens, and checks the rules after every step.

The adversary games each rule of issue 19 too: a proposer citing every value with
generic or copied justifications, unknown programs (`make`, `npm install`), reviewers
citing everything, an integrator adjusting one value twice in an episode. The checks:
no high-stakes run without a person, no medium run with dissent or unanswered flags
without one, weights within bounds and moved at most 0.1 per value per episode, nobody
reviews its own proposal. bench/adversarial_rules.py runs it for 10,000+ steps."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shared import records
from shared.consensus import Proposal
from shared.errors import SharedError
from tests.thoughtworld import CITIZENS, assert_allowed_to_run, commons, env, proposal, vote

WHO = (*CITIZENS, "operator")
KINDS = {"low": ("read_file", "README.md", ""), "medium": ("write_file", "w/{pid}.md", "hi"),
         "high": ("delete_file", "README.md", ""), "make": ("run", "", "make build"),
         "npm": ("run", "", "npm install left-pad")}
VERIFY = ("approve", "approve_with_concerns", "reject", "bogus")
INTEGRATE = ("approve", "reject", "propose_compromise", "escalate_to_human")
# The owed step leans towards approval, so that runs reach execution often.
LEANING_VERIFY = ("approve", "approve", "approve_with_concerns", "reject")
LEANING_INTEGRATE = ("approve", "approve", "approve", "reject", "propose_compromise",
                     "escalate_to_human")
ANSWER = "each flag is answered here: the justification is specific to this change"
VALUES = ("truth", "safety", "efficiency", "coherence", "exploration", "autonomy",
          "cooperation", "transparency")


class _Fixed:
    """Stands in for `st.data()` when a rule is called with its proposal already chosen."""

    def __init__(self, pid: str) -> None:
        self.pid = pid

    def draw(self, _strategy: object) -> str:
        return self.pid


def body_for(kind: str, pid: str, cite: str = "two") -> dict[str, Any]:
    """A proposal of `kind`; `cite`: "two" values specifically, or "all" eight -
    "specific" texts, or "generic" ones (the seed's value-washing)."""
    tool, path, content = KINDS[kind]
    b = proposal(path=path.format(pid=pid), content=content, tool=tool)
    args = {"command": content} if tool == "run" else {"path": path.format(pid=pid),
                                                       "content": content}
    b["actions"] = [{"tool": tool, "args": args}]
    if cite == "all":
        b["value_justification"] = {v: f"{pid} serves {v}: the commit names it and the "
                                       "outcome can be checked" for v in VALUES}
    elif cite == "generic":
        b["value_justification"] = {v: "this helps cooperation" for v in VALUES}
    return b


class ConsensusMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="consensus-sm-"))
        self.c = commons(self.tmp / "shared")
        self.pids: list[str] = []
        self.accepted: set[tuple[str, int, str]] = set()  # (pid, round, step) taken

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------ moves

    @precondition(lambda self: len(self.pids) < 3)  # few proposals, each taken far
    @rule(executor=st.sampled_from(CITIZENS))
    def open_proposal(self, executor: str) -> None:
        # Chosen ids: the roles rotate by id, and hypothesis must see the same run twice.
        pid = f"prop-{len(self.pids):08d}T000000-{len(self.pids):04x}"
        self.pids.append(self.c.request("do something", executor, "operator", pid=pid).id)

    def _take(self, pid: str, step: str, who: str, fn: Any) -> None:
        before = self.c.load(pid)
        try:
            after: Proposal = fn()
        except SharedError:
            return
        # An accepted step was owed by the one who took it, at that phase, once.
        assert before.owed_by == who, (step, before.phase, before.owed_by, who)
        key = (pid, before.round, step)
        assert key not in self.accepted, f"{step} taken twice in round {before.round}"
        self.accepted.add(key)
        assert after is not None

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), who=st.sampled_from(CITIZENS), kind=st.sampled_from(list(KINDS)),
          cite=st.sampled_from(("two", "all", "generic")), answer=st.booleans())
    def propose(self, data: st.DataObject, who: str, kind: str, cite: str = "two",
                answer: bool = False) -> None:
        pid = data.draw(st.sampled_from(self.pids))
        step = "propose" if not self.c.load(pid).revisions else f"revise{self.c.load(pid).round}"
        body = {**body_for(kind, pid, cite),
                "response_to_concerns": ANSWER if answer else ""}
        self._take(pid, step, who, lambda: self.c.propose(pid, who, body))

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), who=st.sampled_from(CITIZENS), decision=st.sampled_from(VERIFY),
          values=st.lists(st.sampled_from(VALUES), max_size=8), concern=st.booleans())
    def verify(self, data: st.DataObject, who: str, decision: str, values: list[str],
               concern: bool = True) -> None:
        pid = data.draw(st.sampled_from(self.pids))
        said = ("it may not do what it claims",) if concern else ()
        self._take(pid, "verify", who,
                   lambda: self.c.verify(pid, who, vote(decision, *said, values=tuple(values))))

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), who=st.sampled_from(CITIZENS), decision=st.sampled_from(INTEGRATE),
          compromise=st.booleans(), values=st.lists(st.sampled_from(VALUES), max_size=8))
    def integrate(self, data: st.DataObject, who: str, decision: str, compromise: bool,
                  values: list[str]) -> None:
        pid = data.draw(st.sampled_from(self.pids))
        body = {**vote(decision, values=tuple(values)),
                **({"compromise": {"proposed_changes": "smaller"}} if compromise else {})}
        self._take(pid, "integrate", who, lambda: self.c.integrate(pid, who, body))

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), who=st.sampled_from(CITIZENS))
    def execute(self, data: st.DataObject, who: str) -> None:
        pid = data.draw(st.sampled_from(self.pids))
        self._take(pid, "execute", who, lambda: self.c.execute(pid, who, env()))

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), who=st.sampled_from(CITIZENS), ok=st.booleans())
    def check(self, data: st.DataObject, who: str, ok: bool) -> None:
        pid = data.draw(st.sampled_from(self.pids))
        self._take(pid, "check", who,
                   lambda: self.c.check(pid, who, {"outcomes_verified": ok, "rationale": "r"}))

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), who=st.sampled_from(CITIZENS),
          adjust=st.lists(st.tuples(st.sampled_from(CITIZENS), st.sampled_from(VALUES),
                                    st.floats(-0.4, 0.4)), max_size=3))
    def record(self, data: st.DataObject, who: str,
               adjust: list[tuple[str, str, float]]) -> None:
        pid = data.draw(st.sampled_from(self.pids))
        notes = {"key_learnings": ["x"], "weight_adjustments": [
            {"citizen": c, "value": v, "delta": dl, "reason": "r"} for c, v, dl in adjust]}
        self._take(pid, "record", who, lambda: self.c.record(pid, who, notes))

    @precondition(lambda self: self.pids)
    @rule(data=st.data())
    def owed_step(self, data: st.DataObject) -> None:
        """Whoever owes the next step takes it, deciding at random (most progress comes
        from here; the rules above try everything else)."""
        pid = data.draw(st.sampled_from(self.pids))
        d = self.c.load(pid)
        who, phase = d.owed_by, d.phase
        if phase in ("propose", "revise"):
            self.propose(_Fixed(pid), who, data.draw(st.sampled_from(list(KINDS))),
                         data.draw(st.sampled_from(("two", "all", "generic"))),
                         data.draw(st.booleans()))
        elif phase == "verify":
            self.verify(_Fixed(pid), who, data.draw(st.sampled_from(LEANING_VERIFY)),
                        data.draw(st.lists(st.sampled_from(VALUES), max_size=8)),
                        data.draw(st.booleans()))
        elif phase == "integrate":
            self.integrate(_Fixed(pid), who, data.draw(st.sampled_from(LEANING_INTEGRATE)),
                           data.draw(st.booleans()),
                           data.draw(st.lists(st.sampled_from(VALUES), max_size=8)))
        elif phase == "execute":
            self.execute(_Fixed(pid), who)
        elif phase == "check":
            self.check(_Fixed(pid), who, data.draw(st.booleans()))
        elif phase == "human":
            self.human(_Fixed(pid), data.draw(st.sampled_from(("approve", "reject"))))
        elif phase == "record":
            self.record(_Fixed(pid), who, data.draw(st.lists(st.tuples(
                st.sampled_from(CITIZENS), st.sampled_from(VALUES), st.floats(-0.4, 0.4)),
                max_size=3)))

    # Rules are drawn uniformly: the owed step appears several times to make progress likely.
    owed_step_2 = owed_step_3 = owed_step_4 = owed_step_5 = owed_step_6 = owed_step

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), who=st.sampled_from(CITIZENS))
    def give_up(self, data: st.DataObject, who: str) -> None:
        pid = data.draw(st.sampled_from(self.pids))
        phase = self.c.load(pid).phase
        self._take(pid, f"give_up_{phase}", who, lambda: self.c.give_up(pid, who, "failed"))

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), decision=st.sampled_from(("approve", "approve", "approve", "reject")))
    def human(self, data: st.DataObject, decision: str) -> None:
        pid = data.draw(st.sampled_from(self.pids))
        before = self.c.load(pid)
        try:
            self.c.decide_human(pid, "root", decision, "because")
        except SharedError:
            return
        if decision == "approve":
            assert before.phase == "human", "a human approved what did not ask for one"

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), citizen=st.sampled_from(CITIZENS), value=st.sampled_from(VALUES),
          delta=st.sampled_from((0.1, -0.1, 0.05)))
    def double_adjust(self, data: st.DataObject, citizen: str, value: str,
                      delta: float) -> None:
        """The integrator moves one value of one participant twice in one episode."""
        pid = data.draw(st.sampled_from(self.pids))
        d = self.c.load(pid)
        step = {"citizen": citizen, "value": value, "delta": delta, "reason": "twice"}
        self._take(pid, "record", d.roles["integrator"], lambda: self.c.record(
            pid, d.roles["integrator"], {"key_learnings": ["x"],
                                         "weight_adjustments": [step, step, step]}))

    @precondition(lambda self: self.pids)
    @rule(data=st.data(), forger=st.sampled_from(CITIZENS),
          name=st.sampled_from(("verify", "integrate", "outcome", "execution")))
    def forge(self, data: st.DataObject, forger: str, name: str) -> None:
        """A citizen writes a step record that names itself for a role it does not hold."""
        pid = data.draw(st.sampled_from(self.pids))
        d = self.c.load(pid)
        role = {"verify": "verifier", "integrate": "integrator", "outcome": "verifier",
                "execution": "executor"}[name]
        if d.roles[role] == forger:
            return
        file = f"{name}-{max(d.round, 1):02d}.json" if name in ("verify", "integrate") \
            else f"{name}.json"
        path = self.c.records_dir / pid / file
        if path.exists():
            return
        records.create(self.c.shared, path, {"citizen": forger, "decision": "approve",
                                             "success": True, "outcomes_verified": True,
                                             "round": d.round})

    @precondition(lambda self: self.pids)
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """A daemon dies mid-write: a torn temp file, and a view that was not refreshed."""
        pid = data.draw(st.sampled_from(self.pids))
        (self.c.records_dir / pid / ".verify-01.json.x.tmp").write_text('{"citi')

    # ------------------------------------------------------------ rules

    @invariant()
    def every_rule_holds(self) -> None:
        self._weights_moved_once_per_episode()
        for pid in self.pids:
            d = self.c.load(pid)
            self._one_directory(pid)
            self._no_self_review(d)
            if (self.c.records_dir / pid / "execution.json").exists() and d.execution:
                self._execution_was_allowed(d)
        for citizen in CITIZENS:
            prof = self.c.weights.profile(citizen)
            for value, w in self.c.weights.current(citizen).items():
                low, high = self.c.framework.bounds[prof][value]
                assert low - 1e-9 <= w <= high + 1e-9, (citizen, value, w)

    def _weights_moved_once_per_episode(self) -> None:
        """Each applied adjustment within ±0.1, and one per value per citizen per episode
        (replaying the history as written, not as `Weights.current` reads it)."""
        moved: set[tuple[str, str, str]] = set()
        for line in self.c.weights.history():
            assert abs(float(line["delta"])) <= 0.1 + 1e-9, line
            key = (str(line["citizen"]), str(line["value"]), str(line["episodes"][0]))
            assert key not in moved, f"{key} moved twice in one episode"
            moved.add(key)

    def _one_directory(self, pid: str) -> None:
        where = self.c.view_locations(pid)
        assert len(where) == 1, f"{pid} is in {where}"

    @staticmethod
    def _no_self_review(d: Proposal) -> None:
        roles = d.roles
        assert len(set(roles.values())) == 3
        for v in d.verifications.values():
            assert v["author"] == roles["verifier"] != roles["executor"]
        for i in d.integrations.values():
            assert i["author"] == roles["integrator"] != roles["executor"]
        if d.outcome:
            assert d.outcome["author"] == roles["verifier"]

    @staticmethod
    def _execution_was_allowed(d: Proposal) -> None:
        assert d.execution is not None and d.execution["author"] == d.roles["executor"]
        assert_allowed_to_run(d)
        assert d.human is None or d.human["decision"] == "approve"


ConsensusMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestConsensusIntegrity = ConsensusMachine.TestCase


def test_the_machine_reaches_execution() -> None:
    """The state machine is not vacuous: a straight run through it executes and records."""
    m = ConsensusMachine()
    try:
        m.open_proposal("opus")
        pid = m.pids[0]
        roles = m.c.load(pid).roles
        m.c.propose(pid, "opus", body_for("medium", pid))
        m.c.verify(pid, roles["verifier"], vote())
        m.c.integrate(pid, roles["integrator"], vote())
        m.c.execute(pid, "opus", env())
        m.every_rule_holds()
        assert json.loads((m.c.records_dir / pid / "execution.json").read_text())["success"]
    finally:
        m.teardown()
