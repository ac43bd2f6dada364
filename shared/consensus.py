"""Thought World consensus among citizens: proposals, votes, decisions, execution, episodes.

Each proposal is a directory of records (`shared/proposals/records/<id>/`), each
written once by the citizen who owes that step and owned by it:

    request.json        the task and the roles (executor, verifier, integrator)
    proposal-NN.json    revision NN by the executor (goal, actions, justification, …)
    verify-NN.json      the verifier's vote on revision NN (it never sees the integrator's)
    integrate-NN.json   the integrator's decision on revision NN
    human.json          an operator's approval or rejection
    execution.json      what the executor's daemon did (the actions voted on, nothing else)
    outcome.json        the verifier's check of the expected outcomes
    episode.json        the integrator's record of what was learned

What a proposal's state is - which step is owed by whom, its stakes, whether its
threshold is met - is derived from these records by `derive`, a pure function,
every time anyone looks. The readable proposal JSON of the seed's schema is a
view rendered from that into exactly one of `pending/`, `approved/`, `rejected/`
(moved by an atomic rename); it is for reading, never trusted for a decision.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from shared import gaming, records, stakes
from shared.atomic import CorruptFile, read_json, write_json
from shared.episodes import Episodes
from shared.errors import SharedError
from shared.identity import ForgedRecord, check_author
from shared.values import Framework, WeightError, Weights, alignment
from shared.world import ActionError, World

log = logging.getLogger(__name__)

ROLES = ("executor", "verifier", "integrator")
APPROVING = ("approve", "approve_with_concerns")
VERIFY_DECISIONS = ("approve", "approve_with_concerns", "reject")
INTEGRATE_DECISIONS = ("approve", "reject", "propose_compromise", "escalate_to_human")
DISCUSSION_ROUNDS = 3  # ladder level 1: rounds of discussion before a compromise
COMPROMISE_ROUND = DISCUSSION_ROUNDS + 1  # level 2: one round on the integrator's compromise
MAX_ROUNDS = 10  # the seed's hard stop: past it, a human decides
CONTESTED_MARGIN = 0.1  # a tiebreak won by less than 10% is contested: a human decides
MAX_ACTIONS = 8
STATES = ("pending", "approved", "rejected")
VIEW_MODE = 0o664  # views are rewritten by whichever citizen acts next (group `citizens`)
OWNER = {"propose": "executor", "revise": "executor", "execute": "executor",
         "verify": "verifier", "check": "verifier", "integrate": "integrator",
         "record": "integrator"}
_ID = re.compile(r"^prop-[0-9T]+-[0-9a-f]{4}$")


class ConsensusError(SharedError, PermissionError):
    """A step that is not this citizen's to take now (or not allowed at all)."""


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Proposal:
    """Everything known about one proposal, derived from its records."""

    id: str
    request: dict[str, Any]
    revisions: list[dict[str, Any]] = field(default_factory=list)
    verifications: dict[int, dict[str, Any]] = field(default_factory=dict)
    integrations: dict[int, dict[str, Any]] = field(default_factory=dict)
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
    flags: list[str] = field(default_factory=list)

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


def rotation(pid: str, executor: str, citizens: Iterable[str]) -> dict[str, str]:
    """Roles by rotation: the verifier and integrator are two other citizens, picked by
    the proposal id, so the burden spreads and nobody reviews its own proposal."""
    others = sorted(c for c in set(citizens) if c != executor)
    if len(others) < 2:
        raise ConsensusError(f"consensus needs two citizens besides {executor} "
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
    """Level 3: the position whose holders' cited values weigh most wins."""
    r = d.round
    cited = {d.roles["executor"]: list(d.revisions[-1].get("value_justification", {})),
             d.roles["verifier"]: list(d.verifications[r].get("values", [])),
             d.roles["integrator"]: list(d.integrations[r].get("values", []))}
    w = weights or {}
    sides = {}
    for side in ("approve", "reject"):
        holders = {c: v for c, v in cited.items() if positions[c] == side}
        sides[side] = alignment({c: w.get(c, {}) for c in holders}, holders)
    top = max(sides.values())
    contested = top == 0 or abs(sides["approve"] - sides["reject"]) <= CONTESTED_MARGIN * top
    winner = "" if contested else max(sides, key=lambda s: sides[s])
    return {"scores": sides, "winner": winner, "contested": contested}


def derive(d: Proposal, weights: Mapping[str, Mapping[str, float]] | None = None) -> Proposal:
    """Work out the phase, stakes, consensus and result of a proposal from its records.

    Rounds are taken in order; a revision counts only if the round before it ended in
    a call to revise, so a revision written out of turn (after a vote, or after an
    approval) is ignored rather than swapping the actions that were voted on.
    """
    revisions, d.revisions = list(d.revisions), []
    d.phase = "propose"
    for rev in revisions:
        d.revisions.append(rev)
        d.level, d.tiebreak, d.consensus = "", None, None
        _evaluate(d, weights)
        if d.phase != "revise":
            break
    _give_up(d)
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
    what = f"{g['citizen']} could not {d.phase}: {str(g.get('why', ''))[:300]}"
    if d.phase in ("propose", "revise"):
        _finish(d, "rejected", f"withdrawn - {what}")
    elif d.human and d.human.get("decision") == "approve":
        d.level = "human"
        _after_approval(d)
    else:
        d.level, d.phase, d.why = "human", "human", f"{what}; a human decides"


def _evaluate(d: Proposal, weights: Mapping[str, Mapping[str, float]] | None) -> None:
    """The state after the last revision in `d.revisions`."""
    d.stakes, d.stakes_reasons = stakes.classify(d.revisions[-1].get("actions", []))
    r = d.round
    if r not in d.verifications:
        d.phase = "verify"
        return
    if r not in d.integrations:
        d.phase = "integrate"
        return
    approvals, positions = _tally(d, r)
    integ = d.integrations[r]
    met = stakes.threshold_met(d.stakes, approvals, len(positions))
    decided = ""
    if integ["decision"] == "escalate_to_human" or r >= MAX_ROUNDS:
        d.level, decided = "human", "human"
    elif met:
        decided = "approved"
    elif r < DISCUSSION_ROUNDS:
        d.level, d.phase = "discussion", "revise"
    elif r == DISCUSSION_ROUNDS and integ.get("compromise"):
        d.level, d.phase = "compromise", "revise"
    else:
        d.level = "tiebreak"
        d.tiebreak = _tiebreak(d, weights, positions)
        if d.tiebreak["contested"]:
            d.level, decided = "human", "human"
        else:
            decided = "approved" if d.tiebreak["winner"] == "approve" else "rejected"
    d.consensus = {"reached": decided in ("approved", "rejected"), "round": r,
                   "threshold": stakes.THRESHOLDS[d.stakes], "stakes": d.stakes,
                   "approvals": approvals, "voters": len(positions), "positions": positions,
                   "result": decided or "discussing", "level": d.level or "vote",
                   "timestamp": integ.get("ts")}
    if not decided:
        return
    if decided == "rejected":
        _finish(d, "rejected", f"rejected in round {r} ({d.level or 'vote'})")
        return
    human_ok = bool(d.human and d.human.get("decision") == "approve")
    if (decided == "human" or d.stakes == "high") and not human_ok:
        d.phase = "human"
        d.why = ("high stakes: a human must approve" if decided != "human" else
                 "escalated to a human (" + ("tiebreak contested" if d.tiebreak else
                                             "by the integrator, or too many rounds") + ")")
        return
    _after_approval(d)


def _after_approval(d: Proposal) -> Proposal:
    if d.execution is not None and d.execution.get("round") != d.round:
        log.warning("ignoring the execution record of %s: it is for round %s, not %d",
                    d.id, d.execution.get("round"), d.round)
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


class Consensus:
    """The protocol over the commons, for one acting citizen (or the operator)."""

    def __init__(self, shared_dir: Path, framework: Framework, profiles: Mapping[str, str],
                 citizens: Iterable[str], enforce_identity: bool) -> None:
        self.shared = shared_dir
        self.dir = shared_dir / "proposals"
        self.records_dir = self.dir / "records"
        self.framework = framework
        self.weights = Weights(shared_dir, framework, profiles)
        self.episodes = Episodes(shared_dir)
        self.world = World(shared_dir)
        self.citizens = sorted(citizens)
        self.enforce = enforce_identity
        # One lock for rendering views: a view moves between state directories under it.
        self.lock = FileLock(str(self.dir / ".views.lock"), mode=0o660)

    # ------------------------------------------------------------ reading

    def ids(self, state: str | None = None) -> list[str]:
        """Proposal ids (all, or those whose view is in `state`), oldest first."""
        if state is not None:
            folder = self.dir / state
            return sorted(p.stem for p in folder.glob("prop-*.json")) if folder.is_dir() else []
        if not self.records_dir.is_dir():
            return []
        return sorted(p.name for p in self.records_dir.iterdir() if _ID.match(p.name))

    def load(self, pid: str) -> Proposal:
        """Read a proposal's records (ignoring forged or broken ones, logged) and derive it."""
        folder = self.records_dir / pid
        if not _ID.match(pid) or not (folder / "request.json").is_file():
            raise ConsensusError(f"no proposal {pid} - `citizen proposals` lists them")
        d = Proposal(pid, read_json(folder / "request.json"))
        roles = d.roles
        for r in range(1, MAX_ROUNDS + 1):
            rev = self._record(folder / f"proposal-{r:02d}.json", roles["executor"])
            if rev is None:
                break
            d.revisions.append(rev)
            ver = self._record(folder / f"verify-{r:02d}.json", roles["verifier"])
            if ver is not None and ver.get("decision") in VERIFY_DECISIONS:
                d.verifications[r] = ver
            integ = self._record(folder / f"integrate-{r:02d}.json", roles["integrator"])
            if integ is not None and integ.get("decision") in INTEGRATE_DECISIONS and ver:
                d.integrations[r] = integ
        for r in range(MAX_ROUNDS + 1):
            g = self._giveup(folder / f"giveup-{r:02d}.json", roles)
            if g is not None:
                d.giveups[r] = g
        d.human = self._human(folder / "human.json")
        d.execution = self._record(folder / "execution.json", roles["executor"])
        d.outcome = self._record(folder / "outcome.json", roles["verifier"])
        d.episode = self._record(folder / "episode.json", roles["integrator"])
        derive(d, {c: self.weights.current(c) for c in roles.values()})
        if d.revisions:
            d.flags = gaming.flags(d.revisions[-1], self.framework.base_values,
                                   self._justifications_elsewhere(pid))
        return d

    def _record(self, path: Path, author: str) -> dict[str, Any] | None:
        if not path.is_file():
            return None
        rec = records.read(path, author, self.enforce)
        if rec is not None and rec.get("citizen") != author:
            log.warning("ignoring %s: it names %s, but the step is %s's", path,
                        rec.get("citizen"), author)
            return None
        return rec

    def _giveup(self, path: Path, roles: Mapping[str, str]) -> dict[str, Any] | None:
        if not path.is_file():
            return None
        rec = records.read_claimed(path, self.enforce)
        if rec is None or rec.get("phase") not in OWNER:
            return None
        if rec.get("citizen") != roles.get(OWNER[str(rec["phase"])]):
            log.warning("ignoring %s: %s does not owe %s", path, rec.get("citizen"),
                        rec.get("phase"))
            return None
        return rec

    def _human(self, path: Path) -> dict[str, Any] | None:
        """An operator's decision: in server mode its file must not belong to any citizen."""
        if not path.is_file():
            return None
        try:
            rec: dict[str, Any] = read_json(path)
        except CorruptFile as exc:
            log.warning("ignoring %s: %s", path, exc)
            return None
        relay = str(rec.get("relayed_by", ""))
        if relay:
            # A mail decision is filed by the citizen that received the mail; it must be
            # that citizen's file and name the message (its mail ledger has it).
            try:
                check_author(path, relay, self.enforce)
            except ForgedRecord as exc:
                log.warning("ignoring %s: %s", path, exc)
                return None
            if not rec.get("message_id"):
                log.warning("ignoring %s: a mail decision without its Message-ID", path)
                return None
        elif self.enforce:
            owner = path.stat().st_uid
            for c in self.citizens:
                try:
                    if pwd.getpwnam(c).pw_uid == owner:
                        log.warning("ignoring %s: written by citizen %s, not an operator",
                                    path, c)
                        return None
                except KeyError:
                    continue
        return rec if rec.get("decision") in ("approve", "reject") else None

    def _justifications_elsewhere(self, pid: str) -> dict[str, str]:
        seen: dict[str, str] = {}
        for other in self.ids():
            if other == pid:
                continue
            for path in sorted((self.records_dir / other).glob("proposal-*.json")):
                try:
                    rev = read_json(path)
                except CorruptFile:
                    continue
                for key in gaming.justification_keys(rev):
                    seen.setdefault(key, other)
        return seen

    def owed(self, citizen: str) -> list[Proposal]:
        """Pending proposals whose next step is `citizen`'s."""
        out = []
        for pid in self.ids("pending"):
            try:
                d = self.load(pid)
            except (ConsensusError, CorruptFile) as exc:
                log.warning("proposal %s: %s", pid, exc)
                continue
            if d.owed_by == citizen:
                out.append(d)
        return out

    # ------------------------------------------------------------ steps

    def request(self, task: str, executor: str, requested_by: str,
                source: Mapping[str, Any] | None = None, pid: str = "") -> Proposal:
        """Open a proposal: `executor` owes its first revision. (`pid`: a chosen id, for
        replays and tests; by default a new time-sortable one.)"""
        if executor not in self.citizens:
            raise ConsensusError(f"{executor} is not a citizen here "
                                 f"({', '.join(self.citizens)})")
        pid = pid or records.new_id("prop")
        if not _ID.match(pid) or (self.records_dir / pid).exists():
            raise ConsensusError(f"'{pid}' is not a new proposal id")
        body = {"id": pid, "task": task[:4000], "roles": rotation(pid, executor, self.citizens),
                "requested_by": requested_by, "source": dict(source or {}), "ts": now_iso()}
        records.create(self.shared, self.records_dir / pid / "request.json", body)
        return self.refresh(pid)

    def _owe(self, pid: str, me: str, *phases: str) -> Proposal:
        d = self.load(pid)
        if d.phase not in phases:
            raise ConsensusError(f"{pid} is at '{d.phase}' (owed by {d.owed_by or 'nobody'}), "
                                 f"not at {' or '.join(phases)}")
        if d.owed_by != me:
            raise ConsensusError(f"{pid}: the {d.phase} step is {d.owed_by}'s, not {me}'s")
        return d

    def _write(self, pid: str, name: str, me: str, body: Mapping[str, Any]) -> Proposal:
        try:
            records.create(self.shared, self.records_dir / pid / name,
                           {**body, "citizen": me, "ts": now_iso()})
        except FileExistsError as exc:
            path = self.records_dir / pid / name
            if self._record(path, me) is None:  # there, but not ours: someone forged it
                raise ConsensusError(
                    f"{pid}: {path} exists but is not {me}'s (uid {path.stat().st_uid}): a "
                    "forged record blocks this step - the operator should remove it") from exc
            raise ConsensusError(f"{pid}: {name} is already recorded; a step is "
                                 "taken once") from exc
        return self.refresh(pid)

    def propose(self, pid: str, me: str, body: Mapping[str, Any]) -> Proposal:
        """The executor's proposal (first revision, or a revision after discussion)."""
        d = self._owe(pid, me, "propose", "revise")
        problem = proposal_problem(body)
        if problem:
            raise ConsensusError(f"{pid}: {problem}")
        rev = {k: body[k] for k in ("goal", "actions", "value_justification",
                                    "expected_outcomes", "risk_assessment") if k in body}
        rev.update(round=d.round + 1, cites=list(body.get("cites", []))[:10],
                   response_to_concerns=str(body.get("response_to_concerns", ""))[:2000],
                   level=d.level or "proposal")
        return self._write(pid, f"proposal-{d.round + 1:02d}.json", me, rev)

    def give_up(self, pid: str, me: str, why: str) -> Proposal:
        """The owner of a proposal, vote or decision says it cannot take its step."""
        d = self._owe(pid, me, "propose", "revise", "verify", "integrate")
        return self._write(pid, f"giveup-{d.round:02d}.json", me,
                           {"phase": d.phase, "why": why[:1000]})

    def verify(self, pid: str, me: str, vote: Mapping[str, Any]) -> Proposal:
        d = self._owe(pid, me, "verify")
        if vote.get("decision") not in VERIFY_DECISIONS:
            raise ConsensusError(f"a verifier decides one of {', '.join(VERIFY_DECISIONS)}")
        body = _clean(vote, ("decision", "rationale", "concerns", "gaming_check",
                             "suggestions", "values"))
        body["deterministic_flags"] = d.flags
        return self._write(pid, f"verify-{d.round:02d}.json", me, body)

    def integrate(self, pid: str, me: str, decision: Mapping[str, Any]) -> Proposal:
        d = self._owe(pid, me, "integrate")
        if decision.get("decision") not in INTEGRATE_DECISIONS:
            raise ConsensusError(f"an integrator decides one of {', '.join(INTEGRATE_DECISIONS)}")
        body = _clean(decision, ("decision", "rationale", "coherence_check", "compromise",
                                 "values", "learnings"))
        after = self._write(pid, f"integrate-{d.round:02d}.json", me, body)
        self.episodes.decision({"ts": now_iso(), "proposal": pid, "round": d.round,
                                "stakes": after.stakes, "consensus": after.consensus,
                                "flags": after.flags})
        return after

    def decide_human(self, pid: str, operator: str, decision: str, why: str = "", *,
                     relayed_by: str = "", message_id: str = "") -> Proposal:
        """An operator approves (only when a human is owed) or rejects (any time before
        execution). `relayed_by`: the citizen whose mailbox received the operator's mail
        decision (then the record is that citizen's file, naming the mail)."""
        d = self.load(pid)
        if decision == "approve" and d.phase != "human":
            raise ConsensusError(f"{pid} is at '{d.phase}': there is nothing for a human to "
                                 "approve yet (high-stakes and escalated proposals ask)")
        if decision == "reject" and (d.execution is not None or d.phase == "done"):
            raise ConsensusError(f"{pid} has already {'run' if d.execution else 'finished'}; "
                                 "it can no longer be rejected")
        if decision not in ("approve", "reject"):
            raise ConsensusError("a human decision is approve or reject")
        try:
            records.create(self.shared, self.records_dir / pid / "human.json",
                           {"operator": operator, "decision": decision, "why": why[:2000],
                            "ts": now_iso(), "relayed_by": relayed_by,
                            "message_id": message_id})
        except FileExistsError as exc:
            raise ConsensusError(f"{pid}: a human has already decided") from exc
        return self.refresh(pid)

    def execute(self, pid: str, me: str, env: Mapping[str, str]) -> Proposal:
        """Carry out the approved revision's actions in the world repository and commit."""
        d = self._owe(pid, me, "execute")
        rev = d.revisions[-1]
        started = now_iso()
        with self.world.lock:
            self.world.repo()
            results = self.world.run(list(rev.get("actions", [])), env)
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
        return self._write(pid, "execution.json", me,
                           {"round": d.round, "started": started, "completed": now_iso(),
                            "success": success,
                            "results": results, "commit": commit, "error": error[:2000]})

    def check(self, pid: str, me: str, verdict: Mapping[str, Any]) -> Proposal:
        """The verifier's outcome check: its judgement and the mechanical checks must agree;
        when they do not, the execution's commit is reverted."""
        d = self._owe(pid, me, "check")
        with self.world.lock:
            mechanical = self.world.check(list(d.revisions[-1].get("actions", [])))
            verified = bool(verdict.get("outcomes_verified")) and all(
                c["met"] for c in mechanical)
            reverted, revert_error = None, ""
            commit = (d.execution or {}).get("commit")
            if not verified and commit:
                try:
                    reverted = self.world.revert(str(commit), me)
                except ActionError as exc:  # recorded; the operator sees it in the proposal
                    revert_error = str(exc)
        body = _clean(verdict, ("rationale", "checks"))
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
                    raise WeightError(f"{who} did not take part in {pid}")
                applied.append(self.weights.adjust(
                    who, str(adj.get("value", "")), float(adj.get("delta", 0.0)),
                    episodes=[ep_id, *[str(e) for e in adj.get("episodes", [])]],
                    approved_by=me, reason=str(adj.get("reason", ""))))
            except (WeightError, TypeError, ValueError) as exc:
                refused.append({**adj, "refused": str(exc)})
        first = d.revisions[0] if d.revisions else {}
        last = d.revisions[-1] if d.revisions else {}
        episode = {
            "id": ep_id, "proposal": pid, "task": d.request.get("task", "")[:500],
            "timestamp": now_iso(), "goal": last.get("goal", ""), "outcome": d.result,
            "why": d.why, "stakes": d.stakes, "consensus_rounds": d.round,
            "conflicts": sum(1 for v in d.verifications.values() if v["decision"] == "reject")
            + sum(1 for i in d.integrations.values() if i["decision"] != "approve"),
            "concerns": sum(len(v.get("concerns", [])) for v in d.verifications.values()),
            "flags": d.flags, "level": d.level or "vote",
            "changed_from_first": bool(first) and first.get("actions") != last.get("actions"),
            "cites": last.get("cites", []),
            "key_learnings": [str(x)[:300] for x in notes.get("key_learnings", [])][:5],
            "values_served": sorted(last.get("value_justification", {})),
            "weight_adjustments": applied, "weight_adjustments_refused": refused,
            "artifacts": [str((a.get("args") or {}).get("path")) for a in
                          last.get("actions", []) if (a.get("args") or {}).get("path")],
            "commit": (d.execution or {}).get("commit"),
        }
        after = self._write(pid, "episode.json", me, episode)
        self.episodes.add(episode)
        return after

    # ------------------------------------------------------------ views

    def refresh(self, pid: str) -> Proposal:
        """Re-derive a proposal and write its view into the one directory its state says."""
        d = self.load(pid)
        view = render(d)
        with self.lock:
            target = self.dir / d.state / f"{pid}.json"
            for state in STATES:
                current = self.dir / state / f"{pid}.json"
                if current != target and current.exists():
                    os.rename(current, target)  # atomic: never in two directories, or none
            records.make_dirs(target.parent, self.shared)
            write_json(target, view, mode=VIEW_MODE)
        return d

    def view_locations(self, pid: str) -> list[str]:
        return [s for s in STATES if (self.dir / s / f"{pid}.json").exists()]


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


def _clean(data: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: data[k] for k in keys if k in data}


def render(d: Proposal) -> dict[str, Any]:
    """The seed's proposal JSON, with every step's reasoning."""
    last = d.revisions[-1] if d.revisions else {}
    roles = d.roles
    votes: dict[str, Any] = {}
    if d.revisions:
        votes["executor"] = {"citizen": roles["executor"], "decision": "approve",
                             "timestamp": last.get("ts"), "rationale": "Proposer approves"}
    if d.round in d.verifications:
        v = d.verifications[d.round]
        votes["verifier"] = {"citizen": roles["verifier"], "decision": v["decision"],
                             "timestamp": v.get("ts"), "rationale": v.get("rationale", ""),
                             "concerns": v.get("concerns", []),
                             "gaming_check": v.get("gaming_check", {})}
    if d.round in d.integrations:
        i = d.integrations[d.round]
        votes["integrator"] = {"citizen": roles["integrator"], "decision": i["decision"],
                               "timestamp": i.get("ts"), "rationale": i.get("rationale", ""),
                               "compromise": i.get("compromise"), "final": True}
    return {
        "schema_version": 1, "id": d.id, "task": d.request.get("task", ""),
        "timestamp": d.request.get("ts"), "proposer": roles.get("executor"), "roles": roles,
        "status": d.state, "phase": d.phase, "owed_by": d.owed_by, "why": d.why,
        "goal": last.get("goal", ""), "actions": last.get("actions", []),
        "value_justification": last.get("value_justification", {}),
        "expected_outcomes": last.get("expected_outcomes", []),
        "risk_assessment": last.get("risk_assessment", []), "cites": last.get("cites", []),
        "stakes": d.stakes, "stakes_reasons": d.stakes_reasons, "round": d.round,
        "votes": votes, "consensus": d.consensus, "tiebreak": d.tiebreak,
        "gaming": {"flags": d.flags}, "human": d.human,
        "rounds": [{"round": r, "proposal": d.revisions[r - 1],
                    "verification": d.verifications.get(r),
                    "integration": d.integrations.get(r)} for r in range(1, d.round + 1)],
        "execution": d.execution, "outcome": d.outcome,
        "episode": (d.episode or {}).get("id"), "source": d.request.get("source", {}),
    }
