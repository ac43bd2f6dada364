"""Thought World consensus in the commons: the threads of `shared/proposals/records/<id>/`.

Each proposal is a thread (`shared.threads`) of records, each written once by the
citizen who owes that step and owned by it:

    request.json        the task and the roles (executor, verifier, integrator)
    proposal-NN.json    revision NN by the executor (goal, actions, justification, …)
    verify-NN.json      the verifier's vote on revision NN (it never sees the integrator's)
    integrate-NN.json   the integrator's decision on revision NN
    giveup-NN.json      an owner that could not take its step
    human.json          an operator's approval or rejection
    execution.json      what the executor's daemon did (the actions voted on, nothing else)
    outcome.json        the verifier's check of the expected outcomes
    episode.json        the integrator's record of what was learned

What a proposal's state is comes from these records through the pure rules
(`shared.consensus.rules.derive`) every time anyone looks. The readable proposal JSON
(`shared.consensus.view.render`) lives in exactly one of `pending/`, `approved/`,
`rejected/` (moved by an atomic rename); it is for reading, never trusted for a decision.

On several servers (`remote`, `shared.remote`) every participant's process asks its own
server's broker, and what a proposal's life writes is the civilization's, decided file
by file: the thread's records are records created once (`shared.threads`); the view a
document (`view`); the workspace's context, notes and artifacts records created once
(`workspace`); the episodes, decisions, patterns and weight history a record a line
(`journal`); the diversity job's lock a lease (`values.Weights.lock`). Still each
server's own: a person's decision (`human.json`: root's file, and root is no citizen
the database knows) and the world repository (the broker's; its remote is
`citizen.broker.remote`'s).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from shared import clock
from shared.consensus import human, tasks, votes
from shared.consensus.episodes import Episodes
from shared.consensus.patterns import Patterns, cleaned
from shared.consensus.reading import REVISION, Reader, revision_digest
from shared.consensus.rules import (
    INTEGRATE_DECISIONS,
    VERIFY_DECISIONS,
    Proposal,
    proposal_problem,
    rotation,
)
from shared.consensus.view import episode_record
from shared.consensus.weighing import Framework, request_problem
from shared.consensus.workspace import Workspace
from shared.consensus.world import ActionError, Runner, World
from shared.errors import Invalid, NotAllowed, NotFound
from shared.remote import Remote

# (citizen, "execute" | "revert", proposal) -> the broker's answer (citizen.access.steps):
# the world repository is the broker's, so the executor and the verifier ask it.
WorldRequest = Callable[[str, str, str], dict[str, Any]]


class Consensus(Reader):
    """The protocol over the commons, for one acting citizen (or the operator): the
    proposals as read (`Reader`) and the steps that write their records."""

    def __init__(self, shared_dir: Path, framework: Framework, profiles: Mapping[str, str],
                 citizens: Iterable[str], enforce_identity: bool, *,
                 medium_programs: Iterable[str] = (), world_request: WorldRequest | None = None,
                 runner: Runner | None = None, remote: Remote | None = None) -> None:
        super().__init__(shared_dir, framework, profiles, citizens, enforce_identity,
                         medium_programs=medium_programs, remote=remote)
        self.episodes = Episodes(shared_dir, remote)
        self.patterns = Patterns(shared_dir, vouch=self._pattern_vouched, remote=remote)
        self.world = World(shared_dir, runner)
        self.world_request = world_request
        self.workspace = Workspace(shared_dir, enforce_identity, executor=lambda pid: (
            self.load(pid).roles.get("executor") if self.threads.exists(pid) else None),
                                   remote=remote)

    # ------------------------------------------------------------ steps

    def request(self, task: str, executor: str, requested_by: str,
                source: Mapping[str, Any] | None = None, pid: str = "", *,
                chain: Mapping[str, Any] | None = None) -> Proposal:
        """Open a proposal: `executor` owes its first revision. (`pid`: a chosen id, for
        replays and tests; by default a new time-sortable one. `chain`: its place in a
        task of several proposals, `tasks.next_request`; none opens a new task.)"""
        if executor not in self.citizens:
            raise NotFound(f"{executor} is not a citizen here "
                                 f"({', '.join(self.citizens)})")
        pid = pid or self.threads.new_id()
        pid = self.threads.open({"task": task[:4000],
                                 "roles": rotation(pid, executor, self.citizens),
                                 "requested_by": requested_by, "source": dict(source or {}),
                                 **({"chain": dict(chain)} if chain else {})},
                                pid)
        self.workspace.open(self.task_of(pid), task, requested_by)
        return self.refresh(pid)

    def task_of(self, pid: str) -> str:
        """The task `pid` is a step of (its workspace's name)."""
        return str(tasks.chain_of(self.threads.header(pid), pid)["task"])

    def _note(self, d: Proposal, me: str, body: Mapping[str, Any]) -> None:
        """A step's note for the task's scratchpad (`workspace/<task>/notes/`)."""
        text = str(body.get("note", "")).strip()
        if text:
            self.workspace.note(tasks.chain_of(d.request, d.id)["task"], me, text)

    def owing(self, pid: str, me: str, *phases: str) -> Proposal:
        """The proposal, if one of `phases` is its step now and `me` owes it.

        :raises NotAllowed: it is at another step, or that step is someone else's.
        """
        return self._owe(pid, me, *phases)

    def _owe(self, pid: str, me: str, *phases: str) -> Proposal:
        d = self.load(pid)
        if d.phase not in phases:
            raise NotAllowed(f"{pid} is at '{d.phase}' (owed by {d.owed_by or 'nobody'}), "
                                 f"not at {' or '.join(phases)}")
        if d.owed_by != me:
            raise NotAllowed(f"{pid}: the {d.phase} step is {d.owed_by}'s, not {me}'s")
        return d

    def _write(self, pid: str, name: str, me: str, body: Mapping[str, Any]) -> Proposal:
        """Record `me`'s step (once; the authorship check is the thread's) and re-derive."""
        self.threads.write(pid, name, me, body)
        return self.refresh(pid)

    def propose(self, pid: str, me: str, body: Mapping[str, Any]) -> Proposal:
        """The executor's proposal (first revision, or a revision after discussion)."""
        d = self._owe(pid, me, "propose", "revise")
        problem = proposal_problem(body) or self._request_problem(body)
        if problem:
            raise Invalid(f"{pid}: {problem}")
        rev = {k: body[k] for k in ("goal", "actions", "value_justification",
                                    "expected_outcomes", "risk_assessment",
                                    "weight_request") if k in body}
        rev.update(round=d.round + 1, cites=list(body.get("cites", []))[:10],
                   response_to_concerns=str(body.get("response_to_concerns", ""))[:2000],
                   level=d.level or "proposal",
                   next_step=str(body.get("next_step", ""))[:tasks.NEXT_CHARS],
                   **votes.costed(body))
        after = self._write(pid, f"proposal-{d.round + 1:02d}.json", me, rev)
        self._note(d, me, body)
        return after

    def give_up(self, pid: str, me: str, why: str) -> Proposal:
        """The owner of a proposal, vote or decision says it cannot take its step."""
        d = self._owe(pid, me, "propose", "revise", "verify", "integrate")
        return self._write(pid, f"giveup-{d.round:02d}.json", me,
                           {"phase": d.phase, "why": why[:1000]})

    def verify(self, pid: str, me: str, vote: Mapping[str, Any]) -> Proposal:
        """The verifier's vote (it never sees the integrator's)."""
        d = self._owe(pid, me, "verify")
        problem = self._request_problem(vote)
        if problem:
            raise Invalid(f"{pid}: {problem}")
        body = votes.vote(vote, "a verifier", VERIFY_DECISIONS, ("concerns", "gaming_check",
                                                              "suggestions", "weight_request"))
        adversarial = d.red_team
        if adversarial and not [c for c in body.get("concerns") or [] if str(c).strip()]:
            raise Invalid(f"{pid} is a red-team review: name at least one way the proposal "
                          "could fail or be gaming (concerns), whatever the decision")
        after = self._write(pid, f"verify-{d.round:02d}.json", me,
                            {**body, "deterministic_flags": d.flags, "red_team": adversarial,
                             REVISION: revision_digest(d.revisions[-1])})
        self._note(d, me, vote)
        return after

    def integrate(self, pid: str, me: str, decision: Mapping[str, Any]) -> Proposal:
        """The integrator's decision, which closes the round (and is logged as an episode
        decision)."""
        d = self._owe(pid, me, "integrate")
        body = votes.vote(decision, "an integrator", INTEGRATE_DECISIONS,
                     ("coherence_check", "compromise", "learnings"))
        collusion = votes.collusion(decision)
        if collusion is not None:
            body["collusion_check"] = collusion
            if collusion["detected"] and body["decision"] in ("approve", "propose_compromise"):
                # The seed's failure mode 6: a collusion the integrator sees is a gaming
                # flag, and gaming flags go to a person - it cannot also approve.
                body.update(decision="escalate_to_human", decision_asked=body["decision"])
        after = self._write(pid, f"integrate-{d.round:02d}.json", me,
                            {**body, REVISION: revision_digest(d.revisions[-1])})
        self.episodes.decision({"ts": clock.now(), "proposal": pid, "round": d.round,
                                "stakes": after.stakes, "consensus": after.consensus,
                                "flags": after.flags})
        self._note(d, me, decision)
        return after

    def decide_human(self, pid: str, operator: str, decision: str, why: str = "", *,
                     relayed_by: str = "", message_id: str = "") -> Proposal:
        """An operator approves (only when a human is owed) or rejects (any time before
        execution). `relayed_by`: the citizen whose mailbox received the operator's mail
        decision (then the record is that citizen's file, naming the mail)."""
        d = self.load(pid)
        if decision == "approve" and d.phase != "human":
            raise NotAllowed(f"{pid} is at '{d.phase}': there is nothing for a human to "
                                 "approve yet (high-stakes and escalated proposals ask)")
        if decision == "reject" and (d.execution is not None or d.phase == "done"):
            raise NotAllowed(f"{pid} has already {'run' if d.execution else 'finished'}; "
                                 "it can no longer be rejected")
        if decision not in ("approve", "reject"):
            raise Invalid("a human decision is approve or reject")
        # Not a thread step: its author is a person (root, or relayed by the citizen that
        # received the mail), checked by `human.read`.
        human.write(self.records_dir, pid,
                    {"operator": operator, "decision": decision, "why": why[:2000],
                     "ts": clock.now(), "relayed_by": relayed_by, "message_id": message_id,
                     **({REVISION: revision_digest(d.revisions[-1])} if d.revisions else {})},
                    self.enforce, decided=lambda: self.load(pid).human is not None)
        return self.refresh(pid)

    def execute(self, pid: str, me: str, env: Mapping[str, str] | None = None) -> Proposal:
        """The executor's step: the broker carries out the approved revision's actions in
        the world repository and commits (`carry_out`); this records what it did. (`env`
        is no longer used: commands run in the broker's sandbox, with nothing of ours.)"""
        d = self._owe(pid, me, "execute")
        started = clock.now()
        if self.world_request is not None:
            done = self.world_request(me, "execute", pid)
        else:  # no broker (the broker itself, a bare Consensus): run here, no command runs
            with self.world.lock:
                done = self.carry_out(pid, me)
        record = {"round": d.round, "started": started, "completed": clock.now(),
                  "success": bool(done.get("success")),
                  "results": list(done.get("results", [])), "commit": done.get("commit"),
                  "error": str(done.get("error", ""))[:2000]}
        after = self._write(pid, "execution.json", me, record)
        # The step's intermediate output, for the task's next steps (its artifacts/).
        chain = tasks.chain_of(d.request, pid)
        self.workspace.artifact(chain["task"], pid, chain["step"], me, record)
        return after

    def carry_out(self, pid: str, me: str) -> dict[str, Any]:
        """The world's owner's step (the broker, which holds its own lock): run the
        approved revision's actions, commit them (or throw them away), say what happened.

        :raises NotAllowed: the execution is not `me`'s to ask for now.
        """
        d = self._owe(pid, me, "execute")
        rev = d.revisions[-1]
        self.world.repo()
        results = self.world.run(list(rev.get("actions", [])))
        success = all(r["ok"] for r in results)
        commit = None
        if success:
            approvers = ", ".join(f"{c} ({p})" for c, p in
                                  (d.consensus or {}).get("positions", {}).items())
            commit = self.world.commit(f"{pid}: {rev.get('goal', '')[:60]}\n\n"
                                       f"Proposal {pid}, round {d.round}, stakes "
                                       f"{d.stakes}.\nVotes: {approvers}\n", me)
        else:
            self.world.discard()
        error = "" if success else next(r["output"] for r in results if not r["ok"])
        return {"round": d.round, "success": success, "results": results, "commit": commit,
                "error": error[:2000]}

    def check(self, pid: str, me: str, verdict: Mapping[str, Any]) -> Proposal:
        """The verifier's outcome check: its judgement and the mechanical checks must agree;
        when they do not, the execution's commit is reverted."""
        d = self._owe(pid, me, "check")
        # The world's lock file is in the commons (any citizen makes or holds it) and the
        # broker, which alone writes the world on a server, excludes by its own lock.
        with self.world.lock if self.world_request is None else nullcontext():
            mechanical = self.world.check(list(d.revisions[-1].get("actions", [])))
            verified = bool(verdict.get("outcomes_verified")) and all(
                c["met"] for c in mechanical)
            reverted, revert_error = None, ""
            commit = (d.execution or {}).get("commit")
            if not verified and commit:
                try:  # the broker's step: it reverts the commit it made for this round
                    reverted = (str(self.world_request(me, "revert", pid)["reverted"])
                                if self.world_request is not None
                                else self.world.revert(str(commit), me))
                except (ActionError, NotAllowed) as exc:  # recorded; the operator sees it
                    revert_error = str(exc)
        body = {**votes.clean(verdict, ("rationale", "checks")), **votes.costed(verdict)}
        body.update(outcomes_verified=verified, model_verdict=bool(
            verdict.get("outcomes_verified")), mechanical=mechanical, reverted=reverted,
                    revert_error=revert_error)
        return self._write(pid, "outcome.json", me, body)

    def record(self, pid: str, me: str, notes: Mapping[str, Any]) -> Proposal:
        """The integrator's episode: what happened and what was learned; weight changes
        it approves are applied within bounds (refused ones are recorded as refused)."""
        d = self._owe(pid, me, "record")
        ep_id = "ep-" + pid.removeprefix("prop-")
        applied, refused = [], []
        participants = set(d.roles.values())
        for adj in list(notes.get("weight_adjustments", []))[:6]:
            who = str(adj.get("citizen", ""))
            try:
                if who not in participants:
                    raise Invalid(f"{who} did not take part in {pid}")
                applied.append(self.weights.adjust(
                    who, str(adj.get("value", "")), float(adj.get("delta", 0.0)),
                    episodes=[ep_id, *[str(e) for e in adj.get("episodes", [])]],
                    approved_by=me, reason=str(adj.get("reason", ""))))
            except (TypeError, ValueError) as exc:  # Invalid is a ValueError
                refused.append({**adj, "refused": str(exc)})
        violated = [{"value": str(v.get("value")), "how": str(v.get("how", ""))[:300]}
                    for v in list(notes.get("values_violated") or [])[:4]
                    if isinstance(v, Mapping) and v.get("value") in self.framework.base_values]
        patterns = cleaned(notes.get("patterns"))
        requests = self._requests(d, ep_id, me, notes)
        applied += [r["line"] for r in requests if "line" in r]
        episode = episode_record(d, ep_id, {**notes, "values_violated": violated,
                                            "patterns": patterns}, applied, refused)
        episode["weight_requests"] = [{k: v for k, v in r.items() if k != "line"}
                                      for r in requests]
        what, stopped = tasks.next_step(d)
        chain = tasks.chain_of(d.request, pid)
        episode["task_chain"] = {k: chain[k] for k in ("task", "step", "previous")}
        if what:  # the task goes on: its next step is a proposal of its own
            text, successor = tasks.next_request(d, what, episode["task_calls"])
            episode["next_proposal"] = self.request(
                text, d.roles["executor"], me, d.request.get("source"), chain=successor).id
        elif stopped:
            episode["chain_stopped"] = stopped
        after = self._write(pid, "episode.json", me, episode)
        self.episodes.add(episode)
        self.patterns.add(patterns, episode=ep_id, proposal=pid, by=me)
        return after

    def _request_problem(self, body: Mapping[str, Any]) -> str:
        """What is wrong with a step's request to change its author's own weights."""
        if body.get("weight_request") is None:
            return ""
        return request_problem(self.framework, body["weight_request"], self.episodes.ids)

    def _requests(self, d: Proposal, ep_id: str, me: str,
                  notes: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The participants' requests to change their own weights (the executor's in its
        last revision, the verifier's in its last vote - each its author's own file) and
        what the integrator `me` decided: an approved one moves exactly what was asked,
        within the bounds; nobody approves its own."""
        decided = {str(x.get("citizen")): x for x in notes.get("weight_requests", [])
                   if isinstance(x, Mapping)}
        asked = [(d.roles["executor"], d.revisions[-1].get("weight_request") if d.revisions
                  else None),
                 (d.roles["verifier"], (d.verifications.get(d.round) or {}).get(
                     "weight_request"))]
        out = []
        for who, req in asked:
            if not isinstance(req, Mapping) or request_problem(self.framework, req):
                continue
            answer = decided.get(who, {})
            entry = {"citizen": who, "value": req["value"], "delta": float(req["delta"]),
                     "reason": str(req.get("reason", ""))[:400],
                     "decision": "approve" if answer.get("decision") == "approve"
                     else "decline", "why": str(answer.get("reason", ""))[:400]}
            if entry["decision"] == "approve":
                try:
                    entry["line"] = self.weights.adjust(
                        who, entry["value"], entry["delta"],
                        episodes=[ep_id, *[str(e) for e in req["episodes"]][:5]],
                        approved_by=me, reason=f"requested by {who}: {entry['reason']}")
                except (TypeError, ValueError) as exc:  # Invalid is a ValueError
                    entry["refused"] = str(exc)
            out.append(entry)
        return out

    # ------------------------------------------------------------ views

    def refresh(self, pid: str) -> Proposal:
        """Re-derive a proposal and write its view into the one directory its state says."""
        d = self.load(pid)
        self.rendered.write(d)
        return d

    def views(self) -> Iterator[dict[str, Any]]:
        """Every proposal's readable view, by state (unreadable ones skipped, logged)."""
        return self.rendered.all()

    def view_locations(self, pid: str) -> list[str]:
        return self.rendered.locations(pid)
