"""Reading a proposal: its thread's records, checked and derived (`Reader`).

A proposal's state comes from its records (see `store`) through the pure rules
(`shared.consensus.rules.derive`) every time anyone looks. Here the records are read
as their owners wrote them: a forged or broken one, a vote on another text of the
revision, a give-up by someone who does not owe that step count for nothing (logged).
The value weights that may break a tie are replayed from a history whose lines count
only when their episode's record vouches for them (`Reader._vouched`).

On several servers (`remote`, `shared.remote`) the records are the broker's, under the
same names (`shared.threads`), and what a folder's stat told here - a proposal opened,
a thread changed - is the broker's listing or stamp of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any, cast

from shared.consensus import gaming, human, weighing
from shared.consensus.episodes import relevant
from shared.consensus.justifications import Justifications
from shared.consensus.rules import (
    INTEGRATE_DECISIONS,
    MAX_ROUNDS,
    OWNER,
    VERIFY_DECISIONS,
    Proposal,
    Vote,
    derive,
    red_team,
    rotation,
)
from shared.consensus.values import Weights
from shared.consensus.view import Views
from shared.consensus.weighing import Framework
from shared.errors import SharedError
from shared.layout import Layout
from shared.records import AUTHOR
from shared.remote import Remote
from shared.threads import PLACE, Threads

log = logging.getLogger(__name__)

REVISION = "revision"  # in a vote: the digest of the revision it judged
PRECEDENTS = 3  # people's decisions a role prompt shows (bounded: the seed's context budget)
PRECEDENTS_SCANNED = 50  # the newest proposals searched for them (a read per proposal)
# What reading one proposal may raise: its request is its opener's file, of any shape -
# missing or broken (SharedError), no plain file (OSError), or JSON of another form.
UNREADABLE = (SharedError, OSError, ValueError, TypeError, KeyError, AttributeError)


def revision_digest(rev: Mapping[str, Any]) -> str:
    """A revision's digest, over the record as read (its every field)."""
    return hashlib.sha256(json.dumps(rev, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Reader:
    """The proposals of the commons as read: records in, `Proposal`s out (derived by the
    pure rules). `store.Consensus` is a reader that also takes the steps."""

    def __init__(self, shared_dir: Path, framework: Framework, profiles: Mapping[str, str],
                 citizens: Iterable[str], enforce_identity: bool, *,
                 medium_programs: Iterable[str] = (), remote: Remote | None = None) -> None:
        self.shared = shared_dir
        self.remote = remote
        self.dir = Layout(shared_dir).proposals
        self.records_dir = Layout(shared_dir).proposal_records
        self.framework = framework
        self.weights = Weights(shared_dir, framework, profiles, vouch=self._vouched,
                               remote=remote)
        self.citizens = sorted(citizens)
        self.enforce = enforce_identity
        self.medium_programs = frozenset(medium_programs)  # the operator's (stakes.json)
        self.threads = Threads(self.records_dir, "prop", "request.json", top=shared_dir,
                               enforce=enforce_identity, what="proposal",
                               lister="citizen proposal list", remote=remote)
        self.rendered = Views(self.dir, shared_dir, remote, proposals=self.threads.ids)
        self.cited = Justifications(self.threads)
        self._weights_seen: tuple[int, ...] = (-1,)
        self._places: dict[str, int] = {}
        self._places_seen = (-1, -1)
        self._evidence_seen: dict[str, tuple[object, Mapping[str, Any],
                                             dict[str, Any] | None]] = {}
        self._derived: dict[str, tuple[object, Proposal]] = {}
        self._listed: dict[str, set[str]] = {}  # a thread's names while it loads (remote)

    # ------------------------------------------------------------ reading

    def ids(self, state: str | None = None) -> list[str]:
        """Proposal ids (all, or those whose records put them in `state`), oldest first -
        from the records, never from the views in proposals/<state>: any citizen can
        plant, move or delete a view there."""
        if state is None:
            return self.threads.ids()
        return [d.id for d in self.derived() if d.state == state]

    def derived(self, problems: list[tuple[str, str]] | None = None) -> list[Proposal]:
        """Every proposal derived from its records, oldest first. One that cannot be read
        (its request a link, a FIFO, a giant, no JSON object) is left out, logged and
        named in `problems` as (id, why): it never stops the others - the operator's
        queue among them. A derivation is kept while the proposal's folders, the value
        weights and the list of proposals are unchanged (the dashboard asks each
        request; a proposal costs ~3 ms to derive)."""
        out = []
        around = (self.weights.key(), self._listing())
        for pid in self.threads.ids():
            if not self.threads.exists(pid):  # an empty folder, or one being opened
                continue
            key = (self.threads.signature(pid), around)
            cached = self._derived.get(pid)
            if cached is not None and cached[0] == key:
                out.append(cached[1])
                continue
            try:
                d = self.load(pid)
            except UNREADABLE as exc:
                log.warning("proposal %s: %s", pid, exc)
                if problems is not None:
                    problems.append((pid, str(exc) or type(exc).__name__))
                continue
            self._derived[pid] = (key, d)
            out.append(d)
        return out

    def _listing(self) -> tuple[int, int]:
        """Changes when a proposal is opened (its place, and so its red-team turn)."""
        if self.remote is not None:  # nothing is deleted there: their count says it
            return (len(self.threads.ids()), 0)
        try:  # links count subdirectories: a new proposal changes it within a clock tick
            st = self.records_dir.stat()
        except FileNotFoundError:
            return (0, 0)
        return (st.st_mtime_ns, st.st_nlink)

    def _finished(self, pid: str) -> bool:
        """Whether proposal `pid` is done as far as a step is concerned, cheaply: its
        integrator (one of three different citizens) wrote its episode record - a
        proposal is done only then (`rules._finish`). Two small reads, not a derivation."""
        roles, record = self._evidence(pid)
        return record is not None and len({roles.get(k) for k in (
            "executor", "verifier", "integrator")} - {None}) == 3

    def load(self, pid: str) -> Proposal:
        """Read a proposal's records (ignoring forged or broken ones, logged) and derive it."""
        if self.remote is not None:  # one listing of the thread, not a read per name (~30)
            self._listed[pid] = set(self.threads.names(pid, "*.json"))
        try:
            with self.weights.steady() if self.remote is not None else nullcontext():
                return self._load(pid)
        finally:
            self._listed.pop(pid, None)

    def _load(self, pid: str) -> Proposal:
        folder = self.records_dir / pid
        d = Proposal(pid, self.threads.header(pid))
        d.red_team = red_team(self._place(pid))
        d.experimental = weighing.experimental(self._place(pid))
        roles = d.roles
        if len({roles.get(k) for k in ("executor", "verifier", "integrator")} - {None}) != 3:
            # The request is its opener's file: one naming the executor its own reviewer
            # (found by an adversarial review: 1 of 1 was "unanimous") gets the rotation.
            log.warning("%s: roles %s are not three different citizens; using the rotation",
                        pid, roles)
            roles = rotation(pid, str(roles.get("executor", "")), self.citizens)
            d.request = {**d.request, "roles": roles}
        for r in range(1, MAX_ROUNDS + 1):
            rev = self._record(folder / f"proposal-{r:02d}.json", roles["executor"])
            if rev is None:
                break
            d.revisions.append(rev)
            ver = self._judging(rev, self._record(folder / f"verify-{r:02d}.json",
                                                  roles["verifier"]))
            if ver is not None and ver.get("decision") in VERIFY_DECISIONS:
                d.verifications[r] = cast(Vote, ver)
            integ = self._judging(rev, self._record(folder / f"integrate-{r:02d}.json",
                                                    roles["integrator"]))
            if integ is not None and integ.get("decision") in INTEGRATE_DECISIONS and ver:
                d.integrations[r] = cast(Vote, integ)
        for r in range(MAX_ROUNDS + 1):
            g = self._giveup(folder / f"giveup-{r:02d}.json", roles)
            if g is not None:
                d.giveups[r] = g
        d.human = self._judging(d.revisions[-1], self._human(folder / "human.json")) \
            if d.revisions else self._human(folder / "human.json")
        d.execution = self._record(folder / "execution.json", roles["executor"])
        d.outcome = self._record(folder / "outcome.json", roles["verifier"])
        d.episode = self._record(folder / "episode.json", roles["integrator"])
        elsewhere = self.cited.elsewhere(pid)
        d.round_flags = {r: gaming.flags(rev, self.framework.base_values, elsewhere)
                         for r, rev in enumerate(d.revisions, 1)}
        d.flags = d.round_flags.get(len(d.revisions), [])
        derive(d, {c: self.weights_in(d, c) for c in roles.values()}, self.medium_programs)
        for why in d.ignored:
            log.warning("%s", why)
        return d

    def weights_in(self, d: Proposal, citizen: str) -> dict[str, float]:
        """`citizen`'s weights as they count in proposal `d`: its current ones, or in an
        experimental round their mirror within its bounds (the history is untouched)."""
        now = self.weights.current(citizen)
        return weighing.counter(self.framework, self.weights.profile(citizen), now) \
            if d.experimental else now

    def _vouched(self, line: Mapping[str, Any]) -> bool:
        """A weight-history line is one its episode's record approved: the integrator of
        proposal `prop-X` wrote `ep-X`'s episode listing exactly this adjustment (the
        history is appended by every integrator, so a line alone proves nothing)."""
        episode = str(line["episodes"][0])
        pid = "prop-" + episode.removeprefix("ep-")
        if not episode.startswith("ep-"):
            return False
        roles, record = self._evidence(pid)
        integrator = roles.get("integrator")
        if not integrator or integrator == roles.get("executor") \
                or line.get("approved_by") != integrator or line["citizen"] == integrator \
                or line["citizen"] not in roles.values():
            return False  # only another participant's weights, approved by the integrator
        return record is not None and any(
            a.get("citizen") == line["citizen"] and a.get("value") == line["value"]
            and abs(float(a.get("delta", 0)) - float(line["delta"])) < 1e-9
            for a in record.get("weight_adjustments", []) if isinstance(a, Mapping))

    def _evidence(self, pid: str) -> tuple[Mapping[str, Any], dict[str, Any] | None]:
        """Proposal `pid`'s roles and its integrator's episode record (({}, None): none),
        read once while its folder is unchanged: the history a citizen may flood with
        lines citing one real proposal costs a stat a line, not two reads."""
        seen: object
        try:
            seen = None if not self.threads.exists(pid) else (
                self.threads.signature(pid) if self.remote is not None
                else (self.records_dir / pid).stat().st_mtime_ns)
        except OSError:
            seen = None
        if seen is None:
            return {}, None
        cached = self._evidence_seen.get(pid)
        if cached is not None and cached[0] == seen:
            return cached[1], cached[2]
        try:
            roles = self.threads.header(pid).get("roles", {})
        except (SharedError, OSError):
            roles = {}
        if not isinstance(roles, Mapping):
            roles = {}
        integrator = roles.get("integrator")
        record = self.threads.read(pid, "episode.json", str(integrator)) if integrator \
            else None
        self._evidence_seen[pid] = (seen, roles, record)
        return roles, record

    def _pattern_vouched(self, line: Mapping[str, Any]) -> bool:
        """A patterns.jsonl line is one its episode's record names: the integrator of
        `prop-X` wrote `ep-X`'s episode listing exactly this pattern (any citizen can
        append to the file, so a line alone proves nothing)."""
        episode = str(line["episode"])
        pid = "prop-" + episode.removeprefix("ep-")
        if not episode.startswith("ep-") or not self.threads.exists(pid):
            return False
        try:
            integrator = self.threads.header(pid).get("roles", {}).get("integrator")
        except (SharedError, OSError):
            return False
        record = self.threads.read(pid, "episode.json", integrator) if integrator else None
        return record is not None and line["pattern"] in record.get("patterns", [])

    def _place(self, pid: str) -> int:
        """`pid`'s place among all proposals, oldest first (-1: unknown); the listing is
        read again only when the records directory changes (a proposal opened)."""
        seen = self._listing()
        if seen != self._places_seen or pid not in self._places:
            # only threads with a request count: an empty directory moves no one's place
            self._places = {p: i for i, p in enumerate(
                t for t in self.threads.ids() if self.threads.exists(t))}
            self._places_seen = seen
        return self._places.get(pid, -1)

    @staticmethod
    def _judging(rev: Mapping[str, Any], vote: dict[str, Any] | None) -> dict[str, Any] | None:
        """`vote` if it judged exactly `rev`: a proposal is its executor's own file, which
        it could rewrite after the votes; a vote for other words does not count. (Votes
        from before this check name no revision and count.)"""
        if vote is None or vote.get(REVISION, revision_digest(rev)) == revision_digest(rev):
            return vote
        log.warning("ignoring a vote of %s on %s: it judged another text of the revision",
                    vote.get(AUTHOR) or vote.get("operator"), rev.get(PLACE))
        return None

    def _unlisted(self, path: Path) -> bool:
        listed = self._listed.get(path.parent.name)
        return listed is not None and path.name not in listed

    def _record(self, path: Path, author: str) -> dict[str, Any] | None:
        if self._unlisted(path):
            return None
        return self.threads.read(path.parent.name, path.name, author)

    def _giveup(self, path: Path, roles: Mapping[str, str]) -> dict[str, Any] | None:
        def owes(rec: dict[str, Any]) -> bool:
            if rec.get("phase") in OWNER and rec.get(AUTHOR) == roles.get(
                    OWNER[str(rec["phase"])]):
                return True
            log.warning("ignoring %s: %s does not owe %s", path, rec.get(AUTHOR),
                        rec.get("phase"))
            return False

        if self._unlisted(path):
            return None
        return self.threads.read(path.parent.name, path.name, accept=owes)

    def _human(self, path: Path) -> dict[str, Any] | None:
        """An operator's decision (`shared.consensus.human`: planted objects count for
        nothing; in server mode only root's file counts)."""
        return human.read(path, self.enforce)

    def precedents(self, text: str, exclude: str = "") -> list[dict[str, Any]]:
        """The seed's "decision logged as precedent": people's decisions on the newest
        PRECEDENTS_SCANNED proposals: the most relevant to `text` first, then the most
        recent, PRECEDENTS in all. Read from the decisions themselves (`human.read`: in server
        mode root's files only), so no citizen can plant a precedent."""
        found = []
        for pid in self.threads.ids()[-PRECEDENTS_SCANNED:]:
            rec = self._human(self.records_dir / pid / human.NAME) if pid != exclude else None
            if rec is None:
                continue
            try:
                task = str(self.threads.header(pid).get("task", ""))
            except (SharedError, OSError):
                continue
            found.append({"proposal": pid, "task": task[:300], "decision": rec["decision"],
                          "why": str(rec.get("why", ""))[:300], "ts": rec.get("ts")})
        ranked = relevant(found, text, lambda p: f"{p['task']} {p['why']}", PRECEDENTS)
        return [*ranked, *[p for p in reversed(found) if p not in ranked]][:PRECEDENTS]

    def owed(self, citizen: str) -> list[Proposal]:
        """Pending proposals whose next step is `citizen`'s. Who owes a proposal's step is
        kept while its thread and the value weights do not change (the weights can decide a
        tiebreak, and so who owes the next step); each step re-derives before acting."""
        weights = self.weights.stamp()
        if weights != self._weights_seen:
            self.threads.forget()
            self._weights_seen = weights
        # Every thread not finished, from the records (a view a citizen moved or planted
        # neither hides nor invents a step).
        candidates = [pid for pid in self.threads.ids() if not self._finished(pid)]
        with self.cited.frozen():  # read once for all the loads below
            ids = self.threads.owed(citizen, candidates,
                                    lambda p: self.load(p).owed_by)
            return [self.load(pid) for pid in ids]
