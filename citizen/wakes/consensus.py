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

from citizen import civilization, paths, state
from citizen.errors import ProviderError, StructuredOutputError
from citizen.tools.base import ToolEnv
from citizen.tools.shell import scrubbed_env
from citizen.wakes.base import Ask, Ending, Gate, Setup, WakeType
from citizen.wakes.task import finish_task
from shared import doorbell
from shared.consensus import Consensus, Proposal, episodes, render, stakes
from shared.consensus.values import MAX_STEP
from shared.errors import SharedError

log = logging.getLogger(__name__)

MAX_STEPS = 12  # steps one wake may take (several proposals can be owed at once)
MAILED = "consensus_mailed"  # mark: proposal id -> the phase its requester was told about
FAILURES = "consensus_failures"  # mark: "pid:round:phase" -> failed attempts
MAX_ATTEMPTS = 3  # failed attempts at one step before its fallback
_S = {"type": "string", "maxLength": 400}
_LIST = {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 4}


def proposal_schema(values: list[str]) -> dict[str, Any]:
    args = {"type": "object", "additionalProperties": False,
            "properties": {k: {"type": "string", "maxLength": 1000 if k == "content" else 200}
                           for k in ("path", "content", "old", "new", "pattern", "command")}}
    return {
        "type": "object", "additionalProperties": False,
        "required": ["goal", "actions", "value_justification", "expected_outcomes",
                     "risk_assessment"],
        "properties": {
            "goal": {"type": "string", "minLength": 1, "maxLength": 200},
            "actions": {"type": "array", "minItems": 1, "maxItems": 4, "items": {
                "type": "object", "additionalProperties": False, "required": ["tool", "args"],
                "properties": {"tool": {"enum": list(stakes.ACTION_TOOLS)}, "args": args}}},
            "value_justification": {"type": "object", "additionalProperties": False,
                                    "properties": {v: _S for v in values}},
            "expected_outcomes": {**_LIST, "minItems": 1},
            "risk_assessment": {"type": "array", "maxItems": 3, "items": {
                "type": "object", "additionalProperties": False,
                "required": ["risk", "mitigation", "severity"],
                "properties": {"risk": _S, "mitigation": _S,
                               "severity": {"enum": ["low", "medium", "high"]}}}},
            "cites": {"type": "array", "items": {"type": "string", "maxLength": 40},
                      "maxItems": 3},
            "response_to_concerns": _S,
        },
    }


def verify_schema(values: list[str]) -> dict[str, Any]:
    return {
        "type": "object", "additionalProperties": False,
        "required": ["decision", "rationale", "concerns", "gaming_check", "values"],
        "properties": {
            "decision": {"enum": ["approve", "approve_with_concerns", "reject"]},
            "rationale": _S, "concerns": _LIST, "suggestions": _LIST,
            "gaming_check": {"type": "object", "additionalProperties": False,
                             "required": ["detected", "explanation"],
                             "properties": {"detected": {"type": "boolean"},
                                            "explanation": _S}},
            "values": {"type": "array", "items": {"enum": values}, "maxItems": 3},
        },
    }


def integrate_schema(values: list[str]) -> dict[str, Any]:
    return {
        "type": "object", "additionalProperties": False,
        "required": ["decision", "rationale", "values"],
        "properties": {
            "decision": {"enum": ["approve", "reject", "propose_compromise",
                                  "escalate_to_human"]},
            "rationale": _S,
            "coherence_check": {"type": "object", "additionalProperties": False,
                                "properties": {"aligns_with_history": {"type": "boolean"},
                                               "relevant_episodes": _LIST,
                                               "systemic_impact": _S}},
            "compromise": {"type": "object", "additionalProperties": False,
                           "properties": {"proposed_changes": _S,
                                          "satisfies_values": _LIST}},
            "values": {"type": "array", "items": {"enum": values}, "maxItems": 3},
            "learnings": _LIST,
        },
    }


CHECK_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": ["outcomes_verified", "rationale"],
    "properties": {
        "outcomes_verified": {"type": "boolean"}, "rationale": _S,
        "checks": {"type": "array", "maxItems": 4, "items": {
            "type": "object", "additionalProperties": False,
            "required": ["outcome", "met"],
            "properties": {"outcome": _S, "met": {"type": "boolean"}, "evidence": _S}}},
    },
}


def record_schema(values: list[str], citizens: list[str]) -> dict[str, Any]:
    return {
        "type": "object", "additionalProperties": False, "required": ["key_learnings"],
        "properties": {
            "key_learnings": {**_LIST, "maxItems": 3},
            "weight_adjustments": {"type": "array", "maxItems": 2, "items": {
                "type": "object", "additionalProperties": False,
                "required": ["citizen", "value", "delta", "reason"],
                "properties": {"citizen": {"enum": citizens}, "value": {"enum": values},
                               "delta": {"type": "number", "minimum": -MAX_STEP,
                                         "maximum": MAX_STEP},
                               "reason": _S}}},
        },
    }


def _dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)


class ConsensusWake(WakeType):
    name = "CONSENSUS"
    loop = False

    def gate(self, setup: Setup) -> Gate:
        me = setup.home.name
        task_id = setup.tasks.next_of("CONSENSUS")
        commons = civilization.consensus(setup.templates)
        owed = [d.id for d in commons.owed(me)]
        notices = _notices_due(commons, me, setup.marks.get(MAILED, {}))
        if not (owed or task_id or notices):
            return Gate(False, "no proposal step is owed by me and no consensus task waits")
        parts = [f"{len(owed)} proposal steps owed"] if owed else []
        parts += [f"consensus task {task_id}"] if task_id else []
        parts += [f"{len(notices)} requester notices"] if notices else []
        return Gate(True, "; ".join(parts), {"task_id": task_id})

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        if gate.data.get("task_id"):
            env.task = setup.tasks.claim(gate.data["task_id"])
        return "take the proposal steps I owe"

    def act(self, setup: Setup, gate: Gate, env: ToolEnv, ask: Ask) -> Ending:
        me = setup.home.name
        commons = civilization.consensus(setup.templates)
        done: list[str] = []
        if env.task is not None:
            env.task_outcome = ("done", _take_task(commons, me, env.task.text, env.task.meta,
                                                   env.task.id))
            done.append(env.task_outcome[1])
        steps = _Steps(commons, setup, ask, env)
        for _ in range(MAX_STEPS):
            owed = commons.owed(me)
            if not owed:
                break
            d = owed[0]
            after: Proposal | None
            try:
                after = steps.take(d)
            except (ProviderError, StructuredOutputError, SharedError) as exc:
                # e.g. the model's answer broke the schema or a rule of the protocol
                why = f"{d.phase} of {d.id}: {type(exc).__name__}: {exc}"
                _log(env, "consensus_step_failed", proposal=d.id, step=d.phase, reason=why)
                after = _after_failure(setup, commons, steps, d, why)
                if after is None:
                    status = "end_turn" if isinstance(exc, SharedError) else "provider_error"
                    return Ending(status, why, "; ".join(done))
                _log(env, "consensus_fallback", proposal=d.id, step=d.phase, next=after.phase)
            done.append(f"{d.phase} {d.id} -> {after.phase}")
            _log(env, "consensus_step", proposal=d.id, step=d.phase, next=after.phase,
                 owed_by=after.owed_by, stakes=after.stakes, flags=after.flags)
            _ring(after, me)
        _send_notices(setup, env, commons, me)
        return Ending("end_turn", text="; ".join(done) or "nothing was owed any more")

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        task = env.task
        if task is not None:
            status, result = env.task_outcome or ("failed", ending.reason or ending.status)
            finish_task(setup, env, task, status, result)
        return (ending.text or ending.reason or ending.status)[:300]


def _after_failure(setup: Setup, commons: Consensus, steps: _Steps, d: Proposal,
                   why: str) -> Proposal | None:
    """Count a failed step; at the MAX_ATTEMPTS-th failure take the fallback so that a
    proposal never waits forever on a model that cannot do it (and never pays forever):
    a proposer withdraws, a reviewer hands over to a human, an outcome check falls back
    to the mechanical checks, a record is written without learnings. None: try again
    at the next wake."""
    key = f"{d.id}:{d.round}:{d.phase}"
    failures = dict(setup.marks.get(FAILURES, {}))
    failures[key] = int(failures.get(key, 0)) + 1
    setup.marks[FAILURES] = failures
    state.mark(setup.home, FAILURES, failures)
    if failures[key] < MAX_ATTEMPTS:
        return None
    note = f"failed {failures[key]} times; last: {why}"
    if d.phase in ("propose", "revise", "verify", "integrate"):
        return commons.give_up(d.id, steps.me, note)
    if d.phase == "check":
        mechanical = commons.world.check(d.revisions[-1].get("actions", []))
        return commons.check(d.id, steps.me, {
            "outcomes_verified": bool(mechanical) and all(c["met"] for c in mechanical),
            "rationale": f"model unavailable ({note}); mechanical checks only"})
    if d.phase == "record":
        return commons.record(d.id, steps.me, {"key_learnings": []})
    return None


def _log(env: ToolEnv, event: str, **data: Any) -> None:
    if env.log is not None:
        env.log.event(event, **data)


_DECISION = re.compile(r"^\s*(approve|reject)\b\s*(prop-[0-9T]+-[0-9a-f]{4})?\s*(.*)$",
                       re.IGNORECASE | re.MULTILINE)
_PID = re.compile(r"prop-[0-9T]+-[0-9a-f]{4}")


def _take_task(commons: Consensus, me: str, text: str, meta: dict[str, Any],
               task_id: str) -> str:
    """A consensus task: an operator's mail decision on a proposal, or work to propose."""
    body = text.split("\n\n", 1)[1] if text.startswith("Mail from") else text
    decision = _DECISION.search(body.split("\n>", 1)[0])
    pid_in_subject = _PID.search(str(meta.get("subject", "")))
    if decision and (decision.group(2) or pid_in_subject):
        pid = decision.group(2) or (pid_in_subject.group(0) if pid_in_subject else "")
        operator = str(meta.get("from", "operator"))
        try:
            d = commons.decide_human(pid, operator, decision.group(1).lower(),
                                     decision.group(3).strip(), relayed_by=me,
                                     message_id=str(meta.get("message_id", "")))
        except SharedError as exc:
            return f"could not record {operator}'s decision on {pid}: {exc}"
        _ring(d, me)
        return f"recorded {operator}'s {decision.group(1).lower()} of {pid}; it is now at {d.phase}"
    d = commons.request(text, me, me, source={"task": task_id, **{
        k: meta[k] for k in ("from", "subject", "message_id", "references") if k in meta}})
    return (f"filed as proposal {d.id}: {d.roles['verifier']} verifies, "
            f"{d.roles['integrator']} integrates. Follow it with `citizen proposal show {d.id}`;"
            " I will write again when it is decided.")


def _ring(d: Proposal, me: str) -> None:
    who = d.owed_by
    if who in ("", "operator", me):
        return
    try:
        doorbell.ring(paths.home(who).doorbell, "CONSENSUS", f"{d.phase} of {d.id}", sender=me)
    except OSError as exc:  # the proposal waits for its slot wake instead
        log.warning("could not ring %s for %s: %s", who, d.id, exc)


def _notices_due(commons: Consensus, me: str, mailed: dict[str, str]) -> list[Proposal]:
    """Proposals I requested from mail whose requester has not heard of their state."""
    due = []
    for state_dir in ("pending", "approved", "rejected"):
        for pid in commons.ids(state_dir):
            if pid in mailed and mailed[pid] == "done":
                continue
            view = commons.dir / state_dir / f"{pid}.json"
            try:
                data = json.loads(view.read_bytes())
            except (OSError, ValueError):
                continue
            source = data.get("source") or {}
            if data.get("proposer") != me or not source.get("from"):
                continue
            if data.get("phase") in ("human", "done") and mailed.get(pid) != data.get("phase"):
                due.append(commons.load(pid))
    return due


def _send_notices(setup: Setup, env: ToolEnv, commons: Consensus, me: str) -> None:
    mailed = dict(setup.marks.get(MAILED, {}))
    due = _notices_due(commons, me, mailed)
    if not due:
        return
    from citizen.mail import MailError, account  # noqa: PLC0415 - mail requesters only
    from citizen.mail.outbox import notice  # noqa: PLC0415

    for d in due:
        src = d.request.get("source", {})
        if d.phase == "human":
            subject = f"[consensus] approval needed: {d.id}"
            body = (f"Proposal {d.id} ({d.stakes} stakes) needs a human decision: {d.why}.\n\n"
                    f"Goal: {render(d)['goal']}\nActions:\n{_dump(render(d)['actions'])}\n\n"
                    f"Reply with 'approve {d.id}' or 'reject {d.id} <why>' as the first line,"
                    f" or run `citizen approve {d.id}` on the server.\n")
        else:
            subject = f"[consensus] {d.result}: {d.id}"
            body = (f"Proposal {d.id} was {d.result}: {d.why}.\n\n"
                    f"{_dump(render(d)['consensus'])}\n")
        try:
            note = notice(setup.home, account(env.secrets), str(src["from"]), subject, body,
                          in_reply_to=str(src.get("message_id", "")))
        except MailError as exc:
            note = f"not sent: {exc}"
        _log(env, "consensus_notice", proposal=d.id, phase=d.phase, to=src.get("from"),
             note=note)
        mailed[d.id] = d.phase
    state.mark(setup.home, MAILED, mailed)


class _Steps:
    """One step of a proposal, in the owed role's prompt."""

    def __init__(self, commons: Consensus, setup: Setup, ask: Ask, env: ToolEnv) -> None:
        self.c = commons
        self.tpl = setup.templates
        self.me = setup.home.name
        self.ask = ask
        self.env = env
        self.values = list(commons.framework.base_values)

    def take(self, d: Proposal) -> Proposal:
        step = {"propose": self.propose, "revise": self.propose, "verify": self.verify,
                "integrate": self.integrate, "execute": self.execute, "check": self.check,
                "record": self.record}[d.phase]
        return step(d)

    def _weights(self) -> str:
        return _dump(self.c.weights.current(self.me))

    def _episodes(self, d: Proposal) -> str:
        return _dump(episodes.brief(self.c.episodes.relevant(
            f"{d.request.get('task', '')} {render(d)['goal']}")))

    def _prompt(self, role: str, d: Proposal, role_prompt: str) -> str:
        return self.tpl.wake_prompt("CONSENSUS", role=role, proposal_id=d.id,
                                    role_prompt=role_prompt)

    def propose(self, d: Proposal) -> Proposal:
        discussion = [{"round": r, "your_proposal": {k: d.revisions[r - 1].get(k) for k in
                                                     ("goal", "actions")},
                       "verifier": _said(d.verifications.get(r)),
                       "integrator": _said(d.integrations.get(r))}
                      for r in range(1, d.round + 1)]
        text = self.tpl.prompt("executor", weights_json=self._weights(),
                               recent_episodes_json=self._episodes(d),
                               task_description=d.request.get("task", ""),
                               discussion_json=_dump(discussion) if discussion else "(none yet)")
        data = self.ask(self._prompt("executor", d, text), proposal_schema(self.values),
                        f"consensus_{d.phase}", max_tokens=1200)
        return self.c.propose(d.id, self.me, data)

    def verify(self, d: Proposal) -> Proposal:
        # Sequential isolation (the seed's groupthink mitigation): the verifier sees the
        # proposal, the system's checks and its own earlier votes - never the integrator's.
        view = {"goal": render(d)["goal"], "actions": render(d)["actions"],
                "value_justification": render(d)["value_justification"],
                "expected_outcomes": render(d)["expected_outcomes"],
                "risk_assessment": render(d)["risk_assessment"],
                "response_to_concerns": d.revisions[-1].get("response_to_concerns", ""),
                "stakes": d.stakes, "stakes_reasons": d.stakes_reasons,
                "red_flags_found_by_the_system": d.flags,
                "your_earlier_votes": [_said(d.verifications.get(r))
                                       for r in range(1, d.round)]}
        text = self.tpl.prompt("verifier", weights_json=self._weights(),
                               proposal_json=_dump(view), recent_episodes_json=self._episodes(d))
        data = self.ask(self._prompt("verifier", d, text), verify_schema(self.values),
                        "consensus_verify", max_tokens=700)
        return self.c.verify(d.id, self.me, data)

    def integrate(self, d: Proposal) -> Proposal:
        rules = {"stakes": d.stakes, "why": d.stakes_reasons,
                 "threshold": stakes.THRESHOLDS[d.stakes], "round": d.round,
                 "ladder": "rounds 1-3: discussion (the executor revises); in round 3 you may "
                           "propose a compromise; then a weight-based tiebreak; then a human"}
        view = render(d)
        proposal = {k: view[k] for k in ("goal", "actions", "value_justification",
                                         "expected_outcomes", "risk_assessment", "cites")}
        proposal["red_flags_found_by_the_system"] = d.flags
        text = self.tpl.prompt("integrator", weights_json=self._weights(),
                               consensus_rules_json=_dump(rules), proposal_json=_dump(proposal),
                               verification_json=_dump(d.verifications[d.round]),
                               recent_episodes_json=self._episodes(d))
        data = self.ask(self._prompt("integrator", d, text), integrate_schema(self.values),
                        "consensus_integrate", max_tokens=700)
        return self.c.integrate(d.id, self.me, data)

    def execute(self, d: Proposal) -> Proposal:
        # No model here: the daemon runs exactly the actions that were voted on.
        return self.c.execute(d.id, self.me, scrubbed_env(str(self.c.world.dir)))

    def check(self, d: Proposal) -> Proposal:
        text = self.tpl.prompt(
            "outcome_check", weights_json=self._weights(),
            expected_json=_dump(d.revisions[-1].get("expected_outcomes", [])),
            execution_json=_dump(d.execution),
            mechanical_json=_dump(self.c.world.check(d.revisions[-1].get("actions", []))))
        data = self.ask(self._prompt("verifier", d, text), CHECK_SCHEMA, "consensus_check",
                        max_tokens=600)
        return self.c.check(d.id, self.me, data)

    def record(self, d: Proposal) -> Proposal:
        others = [c for c in d.roles.values() if c != self.me]
        text = self.tpl.prompt("record", weights_json=self._weights(),
                               proposal_json=_dump(render(d)),
                               participants_json=_dump({c: self.c.weights.current(c)
                                                        for c in others}))
        data = self.ask(self._prompt("integrator", d, text), record_schema(self.values, others),
                        "consensus_record", max_tokens=600)
        return self.c.record(d.id, self.me, data)


def _said(vote: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if vote is None:
        return None
    return {k: vote[k] for k in ("decision", "rationale", "concerns", "compromise",
                                 "suggestions") if k in vote}
