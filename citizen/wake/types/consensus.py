"""CONSENSUS wakes: take every step of a Thought World proposal that this citizen owes.

The gate is deterministic (proposal records and the task queue, no model): a
CONSENSUS slot with nothing owed is idle and free. Each step is one
schema-validated call in the role's prompt - propose or revise (executor), verify
and check outcomes (verifier), integrate and record (integrator) - except
execution, which runs the approved actions with no model at all. After a step,
the next owner's doorbell rings, so a proposal moves at conversation speed.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from citizen import civilization
from citizen.mail import citizen_addresses
from citizen.tools.base import ToolEnv
from citizen.tools.shell import scrubbed_env
from citizen.wake.types.base import Ask, Setup
from citizen.wake.types.consensus_notices import MAILED, notices_due, send_notices
from citizen.wake.types.owed import OwedStepsWake, Spec
from shared.consensus import (
    INTEGRATE_DECISIONS,
    VERIFY_DECISIONS,
    Consensus,
    Proposal,
    episodes,
    render,
    stakes,
    tasks,
)
from shared.consensus.calls import CALLS
from shared.consensus.rules import MAX_ACTIONS
from shared.consensus.view import COST
from shared.consensus.weighing import MAX_STEP
from shared.errors import Invalid, SharedError

log = logging.getLogger(__name__)

# The seed's executor call (000 L869): a proposal of MAX_ACTIONS actions with their
# justifications fits; 1200 cut a large valid one off mid-JSON.
PROPOSAL_MAX_TOKENS = 2048


def _dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)


class ConsensusWake(OwedStepsWake[Proposal]):
    name = "CONSENSUS"
    # 12 steps a wake (several proposals can be owed at once); the fallback at the third
    # failure of a step ("pid:round:phase").
    spec = Spec(12, 3, "consensus_failures", "consensus_step",
                "no proposal step is owed by me and no consensus task waits",
                "requester notices")

    def store(self, setup: Setup) -> Consensus:
        return _consensus(setup)

    def take(self, setup: Setup, env: ToolEnv, ask: Ask, item: Proposal) -> Proposal:
        steps = _Steps(_consensus(setup), setup, ask, env)
        batch = [item, *[d for d in _consensus(setup).owed(setup.home.name)
                         if d.id != item.id and _batchable(d)]][:MAX_BATCH] \
            if _batchable(item) else [item]
        if len(batch) == 1:
            return steps.take(item)
        # The seed's "combine low-stakes proposals into one review": one call, and each
        # verdict still its proposal's own vote file, written by the same rules.
        after, errors = steps.verify_batch(batch)
        for d in batch[1:]:
            if d.id in after:
                env.event(self.spec.event, thread=d.id, batched_with=item.id,
                          **self.step_data(d, after[d.id]))
                for who, reason in self.rings(setup, after[d.id]):
                    civilization.commons(setup.templates).ring(who, self.name, reason,
                                                               sender=setup.home.name)
            else:  # left owed: the next step (or wake) reviews it again
                env.event(f"{self.spec.event}_failed", thread=d.id,
                          reason=f"{type(errors[d.id]).__name__}: {errors[d.id]}"[:500])
        if item.id not in after:
            raise errors[item.id]
        return after[item.id]

    def failure_key(self, item: Proposal) -> str:
        return f"{item.id}:{item.round}:{item.phase}"

    def fallback(self, setup: Setup, item: Proposal, why: str) -> Proposal | None:
        """A proposer withdraws, a reviewer hands over to a human, an outcome check falls
        back to the mechanical checks, a record is written without learnings."""
        commons, me = _consensus(setup), setup.home.name
        if item.phase in ("propose", "revise", "verify", "integrate"):
            return commons.give_up(item.id, me, why)
        if item.phase == "check":
            mechanical = commons.world.check(item.revisions[-1].get("actions", []))
            return commons.check(item.id, me, {
                "outcomes_verified": bool(mechanical) and all(c["met"] for c in mechanical),
                "rationale": f"model unavailable ({why}); mechanical checks only"})
        if item.phase == "record":
            return commons.record(item.id, me, {"key_learnings": []})
        return None

    def step_data(self, item: Proposal, after: Proposal) -> dict[str, Any]:
        return {"proposal": item.id, "step": item.phase, "next": after.phase,
                "owed_by": after.owed_by, "stakes": after.stakes, "flags": after.flags,
                "summary": f"{item.phase} -> {after.phase}"}

    def rings(self, setup: Setup, after: Proposal) -> list[tuple[str, str]]:
        following = str((after.episode or {}).get("next_proposal", ""))
        if following:  # the task's next step: its executor proposes it
            return [(after.roles["executor"], f"propose {following}")]
        return [(after.owed_by, f"{after.phase} of {after.id}")] if after.owed_by else []

    def from_task(self, setup: Setup, env: ToolEnv) -> str:
        task = env.task
        assert task is not None  # noqa: S101 - begin() claimed it
        return _take_task(setup, task.text, task.meta, task.id)

    def owed_text(self, owed: list[Proposal]) -> str:
        return f"{len(owed)} proposal steps owed"

    def notices_due(self, setup: Setup) -> int:
        return len(notices_due(_consensus(setup), setup.home.name,
                                setup.marks.get(MAILED, {})))

    def send_notices(self, setup: Setup, env: ToolEnv) -> None:
        send_notices(setup, env, _consensus(setup), setup.home.name)


MAX_BATCH = 5  # low-stakes reviews in one call (the prompt grows with each)


def _batchable(d: Proposal) -> bool:
    """A verification that may share a call: low stakes, no red team (its review must be
    adversarial) and no experimental round (its weights differ from the others')."""
    return d.phase == "verify" and d.stakes == "low" and not d.red_team \
        and not d.experimental


def _consensus(setup: Setup) -> Consensus:
    return civilization.commons(setup.templates).consensus


_DECISION = re.compile(r"^\s*(approve|reject)\b\s*(prop-[0-9T]+-[0-9a-f]{4})?\s*(.*)$",
                       re.IGNORECASE | re.MULTILINE)
_PID = re.compile(r"prop-[0-9T]+-[0-9a-f]{4}")


def _take_task(setup: Setup, text: str, meta: dict[str, Any], task_id: str) -> str:
    """A consensus task: an operator's mail decision on a proposal, or work to propose."""
    commons, me = _consensus(setup), setup.home.name
    body = text.split("\n\n", 1)[1] if text.startswith("Mail from") else text
    decision = _DECISION.search(body.split("\n>", 1)[0])
    pid_in_subject = _PID.search(str(meta.get("subject", "")))
    if decision and (decision.group(2) or pid_in_subject):
        pid = decision.group(2) or (pid_in_subject.group(0) if pid_in_subject else "")
        operator = str(meta.get("from", "operator"))
        if operator.lower() in citizen_addresses():
            # Citizens may mail each other, but a citizen's approval is no person's: a
            # peer (or a prompt-injected model) must not stand in for the human a
            # high-stakes proposal waits for.
            return (f"refused {operator}'s {decision.group(1).lower()} of {pid}: that is a "
                    "citizen's address; a human decision comes from an operator")
        if commons.enforce:
            # On a server nothing this daemon writes can prove a person (its mail ledger
            # is its own file): the person decides at the server, as root.
            return (f"did not record {operator}'s {decision.group(1).lower()} of {pid}: on "
                    "this server a human decision counts only from the operator CLI - "
                    f"run `sudo citizen proposal {decision.group(1).lower()} {pid}` there")
        try:
            d = commons.decide_human(pid, operator, decision.group(1).lower(),
                                     decision.group(3).strip(), relayed_by=me,
                                     message_id=str(meta.get("message_id", "")))
        except SharedError as exc:
            return f"could not record {operator}'s decision on {pid}: {exc}"
        if d.owed_by != me:
            civilization.commons(setup.templates).ring(d.owed_by, "CONSENSUS",
                                                       f"{d.phase} of {d.id}", sender=me)
        return f"recorded {operator}'s {decision.group(1).lower()} of {pid}; it is now at {d.phase}"
    d = commons.request(text, me, me, source={"task": task_id, **{
        k: meta[k] for k in ("from", "subject", "message_id", "references") if k in meta}})
    return (f"filed as proposal {d.id}: {d.roles['verifier']} verifies, "
            f"{d.roles['integrator']} integrates. Follow it with `citizen proposal show {d.id}`;"
            " I will write again when it is decided.")


class _Steps:
    """One step of a proposal, in the owed role's prompt."""

    def __init__(self, commons: Consensus, setup: Setup, ask: Ask, env: ToolEnv) -> None:
        self.c = commons
        self.tpl = setup.templates
        self.me = setup.home.name
        self.ask = ask
        self.env = env
        self.values = list(commons.framework.base_values)
        # The definitions, not only the names: a weight means little without its value.
        self.values_json = _dump(commons.framework.base_values)

    def take(self, d: Proposal) -> Proposal:
        step = {"propose": self.propose, "revise": self.propose, "verify": self.verify,
                "integrate": self.integrate, "execute": self.execute, "check": self.check,
                "record": self.record}[d.phase]
        return step(d)

    def _weights(self, d: Proposal) -> str:
        weights = self.c.weights_in(d, self.me)
        if d.experimental:  # the seed's experimental round: the prompt says so
            return _dump({"experimental_round": "for this proposal only, your weights are "
                          "mirrored within your bounds, to test the collective's assumptions",
                          "weights": weights})
        return _dump(weights)

    def _episodes(self, d: Proposal) -> str:
        return _dump(episodes.brief(self.c.episodes.relevant(
            f"{d.request.get('task', '')} {render(d)['goal']}")))

    def _memory(self, d: Proposal) -> dict[str, str]:
        """What every role prompt is shown besides its weights: the values' definitions,
        people's relevant decisions on earlier proposals, the collective's patterns."""
        about = f"{d.request.get('task', '')} {render(d)['goal']}"
        precedents, patterns = self.c.precedents(about, exclude=d.id), \
            self.c.patterns.relevant(about)
        return {"values_json": self.values_json,
                "human_decisions_json": _dump(precedents) if precedents else "(none)",
                "patterns_json": _dump(patterns) if patterns else "(none yet)"}

    def _ask(self, prompt: str, schema: dict[str, Any], purpose: str, **kw: Any) -> dict[str, Any]:
        """One step's call, its answer carrying what it cost and how many calls it took
        (`view.cost`; the task's call cap, `shared.consensus.calls`)."""
        before, made = self.ask.meter.spent, self.ask.meter.calls
        data = self.ask(prompt, schema, purpose, **kw)
        return {**data, COST: round(self.ask.meter.spent - before, 6),
                CALLS: self.ask.meter.calls - made}

    def _prompt(self, role: str, d: Proposal, role_prompt: str) -> str:
        return self.tpl.wake_prompt("CONSENSUS", role=role, proposal_id=d.id,
                                    role_prompt=role_prompt)

    def propose(self, d: Proposal) -> Proposal:
        discussion = [{"round": r, "your_proposal": {k: d.revisions[r - 1].get(k) for k in
                                                     ("goal", "actions")},
                       "verifier": _said(d.verifications.get(r)),
                       "integrator": _said(d.integrations.get(r)),
                       "red_flags_found_by_the_system": d.round_flags.get(r, []),
                       "sent_back_for_flags": r in d.blocked}
                      for r in range(1, d.round + 1)]
        task = self.tpl.prompt("workspace", task=d.request.get("task", ""),
                               max_steps=tasks.MAX_STEPS, workspace_json=_dump(
                                   self.c.workspace.brief(self.c.task_of(d.id))))
        text = self.tpl.prompt("executor", weights_json=self._weights(d),
                               recent_episodes_json=self._episodes(d),
                               task_description=task,
                               discussion_json=_dump(discussion) if discussion else "(none yet)",
                               **self._memory(d))
        data = self._ask(self._prompt("executor", d, text),
                        self.tpl.schema("consensus_proposal", values=self.values,
                                        action_tools=list(stakes.ACTION_TOOLS),
                                        min_step=-MAX_STEP, max_step=MAX_STEP,
                                        max_actions=MAX_ACTIONS),
                        f"consensus_{d.phase}", max_tokens=PROPOSAL_MAX_TOKENS)
        return self.c.propose(d.id, self.me, data)

    def _review(self, d: Proposal) -> dict[str, Any]:
        # Sequential isolation (the seed's groupthink mitigation): the verifier sees the
        # proposal, the system's checks and its own earlier votes - never the integrator's.
        return {"goal": render(d)["goal"], "actions": render(d)["actions"],
                "value_justification": render(d)["value_justification"],
                "expected_outcomes": render(d)["expected_outcomes"],
                "risk_assessment": render(d)["risk_assessment"],
                "response_to_concerns": d.revisions[-1].get("response_to_concerns", ""),
                "stakes": d.stakes, "stakes_reasons": d.stakes_reasons,
                "red_flags_found_by_the_system": d.flags,
                "your_earlier_votes": [_said(d.verifications.get(r))
                                       for r in range(1, d.round)]}

    def verify(self, d: Proposal) -> Proposal:
        text = self.tpl.prompt("verifier", weights_json=self._weights(d),
                               proposal_json=_dump(self._review(d)),
                               recent_episodes_json=self._episodes(d),
                               stance=self.tpl.prompt("red_team") if d.red_team else "",
                               **self._memory(d))
        schema = self.tpl.schema("consensus_verify", values=self.values,
                                 decisions=list(VERIFY_DECISIONS),
                                 min_step=-MAX_STEP, max_step=MAX_STEP)
        if d.red_team:  # the store refuses a red-team vote naming no way it could fail
            schema["properties"]["concerns"]["minItems"] = 1
        data = self._ask(self._prompt("verifier", d, text), schema,
                        "consensus_verify", max_tokens=700,
                        # The seed: the fast model for routine reviews, not for high stakes.
                        tier="primary" if d.stakes == "high" else "fast")
        return self.c.verify(d.id, self.me, data)

    def verify_batch(self, ds: list[Proposal]
                     ) -> tuple[dict[str, Proposal], dict[str, SharedError]]:
        """One call reviewing several low-stakes proposals (`_batchable`: same weights, no
        red team); each verdict is recorded by `Consensus.verify` as its own vote. Returns
        the proposals voted on and, for the others, why their verdict was refused."""
        ids, first = [d.id for d in ds], ds[0]
        text = self.tpl.prompt("verifier", weights_json=self._weights(first),
                               proposal_json=_dump({d.id: self._review(d) for d in ds}),
                               recent_episodes_json=self._episodes(first),
                               stance=self.tpl.prompt("verifier_batch", count=len(ds),
                                                      ids=", ".join(ids)),
                               **self._memory(first))
        single = self.tpl.schema("consensus_verify", values=self.values,
                                 decisions=list(VERIFY_DECISIONS),
                                 min_step=-MAX_STEP, max_step=MAX_STEP)
        data = self._ask(self._prompt("verifier", first, text),
                         self.tpl.schema("consensus_verify_batch", proposals=ids,
                                         verdict_schema=single),
                         "consensus_verify_batch", max_tokens=700 * len(ds), tier="fast")
        share = round(float(data.pop(COST)) / len(ds), 6)  # the call's cost, split evenly
        calls = round(float(data.pop(CALLS)) / len(ds), 4)  # and its calls
        after: dict[str, Proposal] = {}
        errors: dict[str, SharedError] = {}
        for d in ds:
            verdict = data.get(d.id)
            try:
                if not isinstance(verdict, Mapping):
                    raise Invalid(f"{d.id}: the batch review gave it no verdict")
                after[d.id] = self.c.verify(d.id, self.me, {**verdict, COST: share, CALLS: calls})
            except SharedError as exc:  # a rule refused this vote: the others still count
                errors[d.id] = exc
        return after, errors

    def integrate(self, d: Proposal) -> Proposal:
        rules = {"stakes": d.stakes, "why": d.stakes_reasons,
                 "threshold": stakes.THRESHOLDS[d.stakes], "round": d.round,
                 "ladder": "rounds 1-3: discussion (the executor revises); in round 3 you may "
                           "propose a compromise; then, for low stakes, a weight-based "
                           "tiebreak; medium or high stakes with dissent go to a person; "
                           "system red flags send a medium proposal back to its proposer "
                           "and a high one to a person"}
        view = render(d)
        proposal = {k: view[k] for k in ("goal", "actions", "value_justification",
                                         "expected_outcomes", "risk_assessment", "cites")}
        proposal["red_flags_found_by_the_system"] = d.flags
        text = self.tpl.prompt("integrator", weights_json=self._weights(d),
                               consensus_rules_json=_dump(rules), proposal_json=_dump(proposal),
                               verification_json=_dump(d.verifications[d.round]),
                               recent_episodes_json=self._episodes(d), **self._memory(d))
        data = self._ask(self._prompt("integrator", d, text),
                        self.tpl.schema("consensus_integrate", values=self.values,
                                        decisions=list(INTEGRATE_DECISIONS)),
                        "consensus_integrate", max_tokens=700)
        return self.c.integrate(d.id, self.me, data)

    def execute(self, d: Proposal) -> Proposal:
        # No model here: the daemon runs exactly the actions that were voted on.
        return self.c.execute(d.id, self.me, scrubbed_env(str(self.c.world.dir)))

    def check(self, d: Proposal) -> Proposal:
        text = self.tpl.prompt(
            "outcome_check", weights_json=self._weights(d),
            expected_json=_dump(d.revisions[-1].get("expected_outcomes", [])),
            execution_json=_dump(d.execution),
            mechanical_json=_dump(self.c.world.check(d.revisions[-1].get("actions", []))))
        data = self._ask(self._prompt("verifier", d, text), self.tpl.schema("consensus_check"),
                        "consensus_check", max_tokens=600, tier="fast")
        return self.c.check(d.id, self.me, data)

    def record(self, d: Proposal) -> Proposal:
        others = [c for c in d.roles.values() if c != self.me]
        text = self.tpl.prompt("record", weights_json=self._weights(d),
                               proposal_json=_dump(render(d)),
                               participants_json=_dump({c: self.c.weights.current(c)
                                                        for c in others}),
                               values_json=self.values_json)
        data = self._ask(self._prompt("integrator", d, text),
                        self.tpl.schema("consensus_record", values=self.values, citizens=others,
                                        min_step=-MAX_STEP, max_step=MAX_STEP),
                        "consensus_record", max_tokens=600)
        return self.c.record(d.id, self.me, data)


def _said(vote: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if vote is None:
        return None
    return {k: vote[k] for k in ("decision", "rationale", "concerns", "compromise",
                                 "suggestions") if k in vote}
