"""What a derived proposal renders into: the readable proposal JSON of the seed's schema, and
the episode record of a finished one.

It is for reading (`shared/proposals/<state>/<id>.json`), never trusted for a decision:
`Views` keeps each proposal's view in exactly one of `pending/`, `approved/`,
`rejected/` (moved by an atomic rename). On several servers (`remote`) a proposal's view
is one document, `proposals/view/<id>` ({state, view}), rewritten whole by whoever acts
next in the broker's transaction: a shared read-modify-write, so a document - its one
row is the state directory (no rename, no views' lock).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from shared import clock, door
from shared.atomic import CorruptFile, make_dirs, read_json
from shared.consensus.calls import CALLS, step_calls
from shared.consensus.rules import STATES, Proposal
from shared.errors import SharedError
from shared.locks import locked
from shared.records import overwrite_in
from shared.remote import Remote, key

log = logging.getLogger(__name__)

VIEW_MODE = 0o664  # views are rewritten by whichever citizen acts next (group `citizens`)
# 3775, sticky: group `citizens` adds views, but nobody moves, deletes or replaces one
# another wrote (root's, after a decision). The next actor rewrites such a view in place
# (`overwrite_in`). Views are never trusted - the queue and every step read the records.
VIEW_DIR_MODE = 0o3775
# Every citizen opens the views' lock, so any can hold it: a view waits at most this
# long, then is not written (logged) - root's decision returns, no step hangs.
VIEW_WAIT_S = 10.0


class Views:
    """The readable views under `proposals_dir`, one state directory each."""

    def __init__(self, proposals_dir: Path, shared_dir: Path, remote: Remote | None = None,
                 proposals: Callable[[], list[str]] = list) -> None:
        self.dir = proposals_dir
        self.shared = shared_dir
        # One lock for rendering views: a view moves between state directories under it.
        # 0o660: every citizen (group `citizens`) renders views; nobody else takes it.
        self.lock = proposals_dir / ".views.lock"
        self.remote = remote
        self.proposals = proposals  # every proposal's id, from its records (remote only)

    def _key(self, pid: str) -> str:
        return key(self.shared, self.dir / "view" / pid)

    def _document(self, pid: str) -> dict[str, Any]:
        """{state, view} of `pid` through the broker ({} before its first view)."""
        if self.remote is None:
            return {}
        try:
            doc, _ = self.remote.document(self._key(pid), dict)
        except (OSError, SharedError) as exc:  # a cache: its absence stops nothing
            log.warning("view of %s not read (%s); its records hold it", pid, exc)
            return {}
        return doc if doc.get("state") in STATES and isinstance(doc.get("view"), dict) else {}

    def ids(self, state: str) -> list[str]:
        if self.remote is not None:
            return [p for p in self.proposals() if self._document(p).get("state") == state]
        folder = self.dir / state
        return sorted(p.stem for p in folder.glob("prop-*.json")) if folder.is_dir() else []

    def write(self, d: Proposal) -> None:
        """Write `d`'s view into the directory its state says, and take it out of the
        others (a copy the sticky bit keeps there is rewritten to say the same). A cache
        for readers: a view that cannot be written is logged, and no step waits on it."""
        if self.remote is not None:
            view = {"state": d.state, "view": render(d)}
            try:
                self.remote.update(self._key(d.id), dict, lambda doc: _replace(doc, view))
            except (OSError, SharedError) as exc:
                log.warning("view of %s not written (%s); its records hold it", d.id, exc)
            return
        raw = json.dumps(render(d), ensure_ascii=False, separators=(",", ":")).encode()
        try:
            with locked(self.lock, mode=0o660, timeout=VIEW_WAIT_S):
                make_dirs(self.dir / d.state, self.shared, VIEW_DIR_MODE)
                self._put(d.state, f"{d.id}.json", raw)
                for state in STATES:
                    if state != d.state:
                        self._drop(state, f"{d.id}.json", raw)
        except OSError as exc:
            log.warning("view of %s not written (%s); its records hold it", d.id, exc)

    def _put(self, state: str, name: str, raw: bytes) -> None:
        # beneath the commons: no folder on the way is followed through a link (root
        # writes views after a decision).
        dfd = door.open_dir(self.dir / state, beneath=self.shared)
        try:
            overwrite_in(dfd, name, raw, VIEW_MODE)
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _drop(self, state: str, name: str, raw: bytes) -> None:
        """No view of `name` in `state`: removed, or - another's, kept by the sticky bit -
        rewritten to say where the proposal stands now."""
        try:
            dfd = door.open_dir(self.dir / state, beneath=self.shared)
        except FileNotFoundError:
            return
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass
        except PermissionError:
            overwrite_in(dfd, name, raw, VIEW_MODE)
        finally:
            os.close(dfd)

    def all(self) -> Iterator[dict[str, Any]]:
        """Every proposal's readable view, by state (unreadable ones skipped, logged)."""
        if self.remote is not None:
            docs = [self._document(p) for p in self.proposals()]
            for state in STATES:
                yield from (doc["view"] for doc in docs if doc.get("state") == state)
            return
        for state in STATES:
            for pid in self.ids(state):
                try:
                    yield read_json(self.dir / state / f"{pid}.json")
                except (OSError, CorruptFile) as exc:  # moved meanwhile, or half-written
                    log.warning("view of %s: %s", pid, exc)

    def locations(self, pid: str) -> list[str]:
        if self.remote is not None:
            state = self._document(pid).get("state")
            return [state] if state else []
        return [s for s in STATES if (self.dir / s / f"{pid}.json").exists()]


def _replace(doc: dict[str, Any], new: Mapping[str, Any]) -> None:
    doc.clear()
    doc.update(new)


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
        "gaming": {"flags": d.flags, "sent_back_in_rounds": sorted(d.blocked)},
        "red_team": d.red_team, "experimental_weights": d.experimental,
        "escalation": d.escalation, "human": d.human,
        "rounds": [{"round": r, "proposal": d.revisions[r - 1],
                    "verification": d.verifications.get(r),
                    "integration": d.integrations.get(r)} for r in range(1, d.round + 1)],
        "execution": d.execution, "outcome": d.outcome,
        "episode": (d.episode or {}).get("id"), "source": d.request.get("source", {}),
        "cost": cost(d),
    }


COST = "cost_usd"  # in a step's record: what its model call cost, as its author's meter saw


def step_cost(data: Mapping[str, Any]) -> float:
    """A step's own cost as recorded (a number ≥ 0; anything else counts as 0)."""
    value = data.get(COST)
    return round(float(value), 6) if isinstance(value, int | float) and value >= 0 else 0.0


def cost(d: Proposal, *more: Mapping[str, Any]) -> dict[str, Any]:
    """What a proposal's model calls cost, by step and in total (seed, failure mode 4:
    "track cost per task"). Each step's record carries its own call's cost; the broker's
    ledger is the authority on money, this is the proposal's share of it for reading."""
    steps: list[tuple[str, int, Mapping[str, Any]]] = [
        ("propose" if r == 1 else "revise", r, rev) for r, rev in enumerate(d.revisions, 1)]
    steps += [("verify", r, v) for r, v in d.verifications.items()]
    steps += [("integrate", r, i) for r, i in d.integrations.items()]
    steps += [(name, d.round, rec) for name, rec in (("check", d.outcome), ("record", d.episode))
              if rec is not None]
    steps += [("record", d.round, rec) for rec in more]
    by_step = [{"step": name, "round": r, "author": rec.get("author"), COST: step_cost(rec)}
               for name, r, rec in steps if step_cost(rec)]
    return {"total_usd": round(sum(step_cost(x) for x in by_step), 6), "by_step": by_step}


def final_state(d: Proposal) -> str:
    """The seed's episode `final_state`, from the records: what the world holds now."""
    ex, out = d.execution or {}, d.outcome or {}
    commit = str(ex.get("commit") or "")[:12]
    if not ex:
        return f"{d.result or 'undecided'} without executing: {d.why}"[:300]
    if not ex.get("success"):
        return f"execution failed, nothing changed: {ex.get('error', '')}"[:300]
    if out.get("reverted"):
        return f"executed as {commit}, outcomes not verified, reverted by {out['reverted'][:12]}"
    if out.get("revert_error"):
        return f"executed as {commit}, outcomes not verified, revert failed: a person must look"
    verified = "verified" if out.get("outcomes_verified") else "not checked"
    return f"executed as {commit or 'no change'}, outcomes {verified}"


def episode_record(d: Proposal, ep_id: str, notes: Mapping[str, Any],
                   applied: list[dict[str, Any]], refused: list[dict[str, Any]]) -> dict[str, Any]:
    """The integrator's episode of a finished proposal: what happened and was learned."""
    first = d.revisions[0] if d.revisions else {}
    last = d.revisions[-1] if d.revisions else {}
    return {
        "id": ep_id, "proposal": d.id, "task": d.request.get("task", "")[:500],
        "timestamp": clock.now(), "goal": last.get("goal", ""), "outcome": d.result,
        "why": d.why, "stakes": d.stakes, "consensus_rounds": d.round,
        "proposals_count": len(d.revisions),  # the seed's: each revision was a proposal
        "conflicts": sum(1 for v in d.verifications.values() if v["decision"] == "reject")
        + sum(1 for i in d.integrations.values() if i["decision"] != "approve"),
        "concerns": sum(len(v.get("concerns", [])) for v in d.verifications.values()),
        "flags": d.flags, "level": d.level or "vote", "red_team": d.red_team,
        "experimental_weights": d.experimental,
        "changed_from_first": bool(first) and first.get("actions") != last.get("actions"),
        "cites": last.get("cites", []),
        "key_learnings": [str(x)[:300] for x in notes.get("key_learnings", [])][:5],
        "values_served": sorted(last.get("value_justification", {})),
        "weight_adjustments": applied, "weight_adjustments_refused": refused,
        "artifacts": [str((a.get("args") or {}).get("path")) for a in
                      last.get("actions", []) if (a.get("args") or {}).get("path")],
        "commit": (d.execution or {}).get("commit"),
        # The seed's episode schema: how long the proposal took, from its request to this
        # record, what the world holds now, and which values it served or violated.
        "session_duration_seconds": round(clock.epoch(clock.now())
                                          - clock.epoch(d.request["ts"]))
        if d.request.get("ts") else None,
        "final_state": final_state(d),
        "values_violated": list(notes.get("values_violated", [])),
        "patterns": list(notes.get("patterns", [])),
        COST: step_cost(notes), CALLS: step_calls(notes),
        "cost_total_usd": cost(d, notes)["total_usd"],
        "task_calls": round(d.calls + step_calls(notes), 4),  # the chain's, so far
    }
