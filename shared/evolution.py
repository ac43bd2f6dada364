"""Peer-verified code evolution (Experience v2 §Code Evolution).

A citizen commits a change in its own `~/code` and announces it; peers fetch the
commit from the announcer's repository, test it - the run itself files a record of
the commit, command and exit status, owned by the runner - and report an outcome that
cites that run; two matching peer reports backed by agreeing runs, with no counted report
against them, verify it; peers adopt a verified-good change (cherry-pick); once it is
held by 2/3 of the citizens (its author and its adopters), it is merged into the baseline
(`shared.change_rules` holds these rules, pure).

Layout under `shared/changes/<change id>/`: `announce.json` and `change.bundle` (the
commit's objects, a `git bundle`) by the author, `runs/<time>-<citizen>-<random>.json`
(a test run, by its runner), `reports/<citizen>.json` (naming its run),
`adoptions/<citizen>.json`; and `shared/merged/<change id>.json` by the broker. Each
record is a file of its own, so its Unix owner is its author (checked in server mode, see
`shared.identity`). The status of a change is derived from these files every time it
is read - never stored, so it cannot disagree with them.

The baseline belongs to the broker's user (issue 28, break 4): an adopter whose adoption
brings a change to 2/3 asks the broker (`merge_request`), which re-derives all of this
from the records - whose authorship the file system proves - and applies the commit from
its author's bundle (`Evolution.merge`, `shared.baseline`). No citizen can write it.

On several servers (`remote`) the same records are the civilization's database's rows
under the same names, each authored by the caller its server's kernel named
(`shared.change_rows`, `shared.draws`, `shared.baseline`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from shared import baseline as base_records
from shared import bundles, change_files, change_rules, clock, draws, gitsafe, records
from shared.change_rows import RUNS, ChangeRows
from shared.changes import CLOSED, OUTCOMES, Change
from shared.errors import Invalid, NotAllowed, NotFound
from shared.layout import Layout
from shared.picks import AdoptConflict, cherry_pick, divergence, same_patch
from shared.remote import Remote

log = logging.getLogger(__name__)
__all__ = ["AdoptConflict", "Evolution", "MergeRequest", "divergence"]

BUNDLE = bundles.BUNDLE
# (citizen who adopted, change id) -> the broker's answer; set by the citizen's side.
MergeRequest = Callable[[str, str], None]

def _now() -> str:
    return clock.moment().isoformat(timespec="seconds")


class Evolution:
    """The change records of one civilization."""

    def __init__(self, shared_dir: Path, citizens: list[str], enforce_identity: bool, *,
                 code_dirs: Mapping[str, Path] | None = None,
                 merge_request: MergeRequest | None = None,
                 draw_request: MergeRequest | None = None,
                 reviewers: int = change_rules.REVIEWERS,
                 remote: Remote | None = None) -> None:
        self.shared = shared_dir
        self.dir = Layout(shared_dir).changes
        self.baseline = Layout(shared_dir).baseline
        self.merge_request = merge_request
        self.draw_request = draw_request
        self.reviewers_k = reviewers
        self.citizens = sorted(citizens)
        self.enforce = enforce_identity
        # Where each citizen's repository is: the caller knows the homes' layout; the
        # commons does not (DESIGN §10).
        self.code_dirs = dict(code_dirs or {})
        self.remote = remote  # several servers: the records are the database's rows
        self.rows = ChangeRows(remote) if remote is not None else None

    # ------------------------------------------------------------ reading

    def get(self, change_id: str, *, only: str | None = None) -> Change:
        """A change and its valid records; with `only`, the adoptions and declines of
        that citizen alone (what its REVIEW gate asks: a thousand adopters' records read
        by each of a thousand gates made an adoption round cost N² reads).

        :raises NotFound: no such change.
        """
        if self.rows is not None:
            return self.rows.change(change_id, only, self._announced)
        return change_files.change(self.shared, change_id, only, self.enforce,
                                   self._announced)

    def _announced(self, change_id: str, announce: dict[str, Any] | None) -> Change:
        if announce is None:
            raise NotAllowed(f"the announcement of {change_id} is broken or not its "
                             "author's; it is ignored (the log says why)")
        change = Change(citizen=announce[records.AUTHOR], **{k: announce[k] for k in (
            "id", "commit", "files", "description", "expected_outcome", "announced")})
        self._reviewers(change)
        return change

    def _reviewers(self, change: Change) -> None:
        """Who is asked to review `change`, in order: the broker's draw (on a server only
        a draw its user filed counts; none yet: nobody is asked). Without a broker (the
        commons used alone, in dev mode) the order is the change id's hash order."""
        peers = set(self.citizens) - {change.citizen}
        drawn = draws.read(self.shared, change.id, self.enforce, self.remote)
        if drawn is not None:
            change.order = [n for n in drawn["order"] if n in peers]  # current citizens
            change.k, change.drawn = int(drawn["k"]), str(drawn["drawn"])
        elif not self.enforce and self.remote is None:
            change.order = change_rules.rank("", change.id, peers, {})
            change.k, change.drawn = self.reviewers_k, change.announced

    def draw(self, change_id: str, *, k: int, seed: str, load: Mapping[str, int],
             relevant: set[str]) -> dict[str, Any]:
        """The broker's step at an announcement: rank the author's peers and file the
        order (`shared.draws`; the first draw stands). Returns the draw filed."""
        change = self.get(change_id)
        peers = set(self.citizens) - {change.citizen}
        return draws.write(self.shared, change_id, {
            "change": change_id, "k": k, "drawn": _now(), "seed": seed,
            "order": change_rules.rank(seed, change_id, peers, load, relevant & peers)},
            self.remote)

    def changes(self, *, only: str | None = None) -> list[Change]:
        ids = self.rows.ids() if self.rows is not None else sorted(
            p.name for p in self.dir.iterdir() if (p / "announce.json").exists()) \
            if self.dir.is_dir() else []
        out = []
        for change_id in ids:
            # A broken one hides no other (get logs); a folder of runs alone is no change.
            with contextlib.suppress(NotAllowed, NotFound):
                out.append(self.get(change_id, only=only))
        return out

    # ------------------------------------------------------------ steps

    def announce(self, citizen: str, repo: Path, description: str,
                 expected_outcome: str) -> Change:
        """Announce the commit at the head of `repo` (the citizen's ~/code)."""
        head = gitsafe.out(repo, "rev-parse", "--verify", "HEAD^{commit}")
        change_id = f"{citizen}-{head[:10]}"
        if self.rows is None and (self.dir / change_id).exists():
            raise NotAllowed(f"commit {head[:10]} is already announced as "
                                 f"{change_id}")
        # Plumbing: no textconv or external diff; a root commit lists no files, as before.
        files = sorted(gitsafe.out(repo, "diff-tree", "--no-commit-id", "--name-only", "-r",
                                   "--no-renames", head).splitlines())
        record = {"id": change_id, "commit": head, "files": files, "description":
                  description, "expected_outcome": expected_outcome, "announced": _now()}
        # First the objects, then the announcement that names them.
        if self.rows is not None:
            self.rows.announce(citizen, repo, self.baseline, record)
        else:
            bundles.publish(repo, head, self.dir / change_id / BUNDLE, self.dir,
                            self.baseline)
            records.write(self.dir, self.dir / change_id / "announce.json", citizen, record)
        if self.draw_request is not None:
            try:  # the broker draws its reviewers; without a draw nobody is asked yet
                self.draw_request(citizen, change_id)
            except (NotAllowed, NotFound) as exc:
                log.warning("the broker drew no reviewers for %s: %s", change_id, exc)
        return self.get(change_id)

    def record_run(self, change_id: str, citizen: str, command: str,
                   exit_status: int | None, started: str) -> str:
        """File `citizen`'s test run of a change's commit (written by the process that ran
        it, so owned by `citizen` on a server); returns the name a report cites it by.
        `exit_status` None: the run never finished (it timed out)."""
        record = {"change": change_id, "commit": self.get(change_id).commit,
                  "command": command, "exit_status": exit_status, "started": started,
                  "ended": _now()}
        if self.rows is not None:
            return self.rows.add_run(change_id, citizen, record)
        return records.add(self.dir, self.dir / change_id / RUNS, citizen, record).stem

    def latest_run(self, change: Change, citizen: str) -> tuple[str, dict[str, Any]] | None:
        """`citizen`'s newest valid run record of `change`'s commit (name, record)."""
        if self.rows is not None:
            return self.rows.latest_run(change.id, citizen, change.commit)
        mine = sorted((self.dir / change.id / RUNS).glob(
            f"*-{records.glob_escape(citizen)}-*.json"), reverse=True)  # names begin with the time
        for path in mine[:50]:
            run = records.read(path, citizen, self.enforce)
            if run is not None and run.get("commit") == change.commit:
                return path.stem, run
        return None

    def report(self, change_id: str, citizen: str, outcome: str, note: str, *,
               run_required: bool = False) -> Change:
        """File (or replace) `citizen`'s report on a change, citing its newest test run of
        the change's commit. A "worked" or "failed" no agreeing run backs is recorded but
        never counted (`shared.change_rules`); with `run_required` it is refused.

        :raises NotAllowed: `run_required` and no run of `citizen`'s agrees with `outcome`.
        """
        if outcome not in OUTCOMES:
            raise Invalid(f"outcome must be one of {', '.join(OUTCOMES)}")
        change = self.get(change_id)
        found = self.latest_run(change, citizen)
        record: dict[str, Any] = {"outcome": outcome, "note": note, "ts": _now()}
        if found:
            record["run"] = found[0]
        if run_required and citizen not in (*change.reviewers, change.citizen):
            raise NotAllowed(
                f"you are not one of the reviewers drawn for {change_id} "
                f"({', '.join(change.reviewers) or 'none drawn yet'}): only their reports "
                "count; adopt or hold out once it is verified")
        if run_required and outcome in change_rules.RUN_BACKED:
            if found is None:
                raise NotAllowed(
                    f"'{outcome}' rests on a test run and you have none of {change_id} "
                    f"(commit {change.commit[:12]}): run code_test {change_id} first, then "
                    "report what it showed - or report 'unclear'")
            if not change_rules.agrees(outcome, found[1].get("exit_status")):
                raise NotAllowed(
                    f"your test run of {change_id} ended with exit status "
                    f"{found[1].get('exit_status')}, so it did not show '{outcome}': report "
                    f"'{'worked' if outcome == 'failed' else 'failed'}' or 'unclear', or run "
                    "code_test again")
        self._file(change_id, "reports", citizen, record)
        if citizen == change.citizen:
            log.info("%s reported on its own change %s: recorded, not counted", citizen,
                     change_id)
        return self.get(change_id)

    def pending_reviews(self, citizen: str) -> list[Change]:
        """Changes of others that `citizen` was drawn to review and has not reported on,
        still pending - or verified but not merged: a drawn reviewer runs its test even
        when two others verified it first (the k runs a change asks for; a late "failed"
        splits it, and the broker merges no split)."""
        return [c for c in self.changes(only=citizen) if c.citizen != citizen
                and c.status in ("pending", "verified_good") and citizen in c.reviewers
                and citizen not in c.counted]

    def verified_good(self, *, only: str | None = None) -> list[Change]:
        return [c for c in self.changes(only=only) if c.status in ("verified_good", "merged")]

    def to_adopt(self, citizen: str) -> list[Change]:
        """Verified changes `citizen` has neither adopted nor declined (nor wrote)."""
        return [c for c in self.verified_good(only=citizen)
                if citizen not in c.holders() and citizen not in c.declines]

    def decline(self, change_id: str, citizen: str, reason: str) -> Change:
        """Record that `citizen` holds out from a change (Onboarding: adopting is a choice)."""
        change = self.get(change_id)
        # Why: a holder's decline would say it lacks code it runs - the records would lie.
        if citizen in change.holders():
            raise NotAllowed(f"{citizen} already has {change_id}; there is nothing to decline")
        if not reason.strip():
            raise Invalid("a decline needs a reason: say why you hold out")
        self._file(change_id, "declines", citizen, {"reason": reason, "ts": _now()})
        return self.get(change_id)

    def _file(self, change_id: str, kind: str, citizen: str, record: dict[str, Any]) -> None:
        """`citizen`'s own record of `kind` about a change (rewritten by it alone)."""
        if self.rows is not None:
            self.rows.write(change_id, kind, citizen, record)
        else:
            records.write(self.dir, self.dir / change_id / kind / f"{citizen}.json",
                          citizen, record)

    def fetch(self, change: Change, into: Path) -> None:
        """Bring the change's commit from its author's repository into `into`.

        The author's repository is read as an object store; git runs only in `into`
        (never in a peer's repository as the caller - see `shared.gitsafe`). Several
        servers: from the author's bundle record (its home is another server's).
        """
        if self.rows is not None:
            self.rows.take_objects(change.id, change.citizen, change.commit, into)
            return
        author_repo = self.code_dirs.get(change.citizen)
        if author_repo is None:
            raise NotFound(f"no repository known for {change.citizen} (citizens: "
                           f"{', '.join(sorted(self.code_dirs)) or 'none given'})")
        try:
            gitsafe.import_commit(into, author_repo, change.commit)
        except NotFound as exc:
            raise NotFound(f"commit {change.commit[:12]} is no longer in "
                                 f"{author_repo}; ask {change.citizen} to announce again") \
                from exc

    def adopt(self, change_id: str, citizen: str, repo_path: Path) -> Change:
        """Cherry-pick a verified-good change into `citizen`'s repository; merge into the
        baseline when this adoption brings it to 2/3 of the citizens.

        :raises AdoptConflict: the cherry-pick conflicted (aborted cleanly).
        """
        change = self.get(change_id)
        if change.status not in ("verified_good", "merged"):
            raise NotAllowed(f"{change_id} is {change.status}; only verified-good changes "
                                 "can be adopted")
        if citizen in change.holders():
            raise NotAllowed(f"{citizen} already has {change_id}")
        self.fetch(change, repo_path)
        new_head = cherry_pick(repo_path, change, citizen)
        self._file(change_id, "adoptions", citizen, {"commit": new_head, "ts": _now()})
        change = self.get(change_id)
        if not change.merged and self.held_enough(change) and self.merge_request:
            try:  # the broker merges it; the adoption stands either way
                self.merge_request(citizen, change_id)
            except (NotAllowed, NotFound) as exc:
                log.warning("the broker did not merge %s: %s", change_id, exc)
            change = self.get(change_id)
        return change

    def quorum(self) -> int:
        """How many of an author's peers must adopt a change before it goes into the
        baseline: 2/3 of the citizens, the author counted (`shared.change_rules`)."""
        return change_rules.adopters_needed(len(self.citizens))

    def held_enough(self, change: Change) -> bool:
        """Whether 2/3 of the author's peers (current citizens) have adopted `change`."""
        return change_rules.held_enough(set(self.citizens), change.citizen,
                                        set(change.adoptions))

    def merge(self, change_id: str, by: str) -> str:
        """The broker's step: apply a verified change that 2/3 of the citizens hold to the
        baseline (from its author's bundle), record it; returns the new baseline commit.

        :raises NotAllowed: not verified good, not held by enough citizens, or the
            baseline's main carries commits no review put there.
        :raises NotFound: no such change, or its bundle lacks the announced commit.
        """
        new_head, record = self.apply(change_id, by)
        if record is not None:
            self.record_merge(record)
        return new_head

    def record_merge(self, record: dict[str, Any]) -> None:
        """File `apply`'s merge record (several servers: once the remote took the commit)."""
        base_records.write_merged(self.shared, record["change"], record, self.remote)
        log.info("change %s merged as %s", record["change"], record["baseline_commit"][:12])

    def apply(self, change_id: str, by: str) -> tuple[str, dict[str, Any] | None]:
        """`merge` unrecorded: (new baseline commit, its record) - (commit, None): merged."""
        change = self.get(change_id)
        if change.merged:
            return str(change.merged["baseline_commit"]), None
        # Re-derived here from the records alone: reports count only with their
        # reporters' own agreeing runs of this commit (files' owners, in server mode).
        if change.status != "verified_good":
            raise NotAllowed(f"{change_id} is {change.status}: only a change two peers' "
                             "test runs showed working, none failing, goes into the "
                             "baseline")
        if not self.held_enough(change):
            peers = set(self.citizens) - {change.citizen}
            raise NotAllowed(
                f"{change_id} is adopted by {len(set(change.adoptions) & peers)} of "
                f"{change.citizen}'s {len(peers)} peers; the baseline takes it at "
                f"{self.quorum()} (2/3 of the citizens, its author counted) - more peers "
                "adopt it "
                "first (code_adopt)")
        stray = base_records.unreviewed(self.baseline, self.shared, self.enforce,
                                        remote=self.remote)
        # Several servers: this very change, pushed but its record not yet written (the
        # database failed after the push, or another server's broker is writing it).
        if self.rows is not None and stray == [gitsafe.read_head(self.baseline)] \
                and same_patch(self.baseline, stray[0], change.commit):
            return stray[0], self._merge_record(change, stray[0], by)
        if stray:
            raise NotAllowed(
                f"the baseline's main carries {len(stray)} commit(s) no review put there "
                f"({', '.join(c[:12] for c in stray[:5])}); nothing is merged on top until "
                "the operator moves main back to the last reviewed commit")
        if self.rows is not None:
            self.rows.take_objects(change.id, change.citizen, change.commit, self.baseline)
        else:
            bundles.unbundle(self.dir / change.id / BUNDLE, change.id, change.citizen,
                             change.commit, baseline=self.baseline, enforce=self.enforce)
        new_head = cherry_pick(self.baseline, change, by)
        return new_head, self._merge_record(change, new_head, by)

    def _merge_record(self, change: Change, new_head: str, by: str) -> dict[str, Any]:
        return {"change": change.id, "baseline_commit": new_head, "by": by, "ts": _now(),
                "holders": sorted(change.holders()),
                # What verified it: each counted reporter's run (the audit trail).
                "verified_by": {w: change.reports[w].get("run") for w in change.counted}}

    def status(self) -> dict[str, Any]:
        """Adoption rates and what is pending, for `code_status`."""
        changes = self.changes()
        return {
            "citizens": self.citizens,
            "changes": [{**c.summary(), "adoption_rate":
                         f"{len(c.holders())}/{len(self.citizens)}"} for c in changes],
            "pending": [c.id for c in changes if c.status == "pending"],
            # The author learns here why a change of its own closed without a verdict.
            "closed": [c.id for c in changes if c.status in CLOSED],
        }
