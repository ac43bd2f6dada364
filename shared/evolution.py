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
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from shared import baseline as base_records
from shared import bundles, change_rules, clock, draws, gitsafe, records
from shared.changes import CLOSED, OUTCOMES, Change, whole_announcement
from shared.errors import Invalid, NotAllowed, NotFound
from shared.layout import Layout

log = logging.getLogger(__name__)

BUNDLE = bundles.BUNDLE
# (citizen who adopted, change id) -> the broker's answer; set by the citizen's side.
MergeRequest = Callable[[str, str], None]
RUNS = "runs"  # test-run records, one file each, owned by the citizen that ran them
RUN_NAME = re.compile(r"^[0-9]{8}T[0-9]{12}-[a-z][a-z0-9_-]{0,30}-[0-9a-f]{8}$")  # add's

class AdoptConflict(NotAllowed):
    """A cherry-pick conflicted; it was aborted and the repository left as it was."""


def _now() -> str:
    return clock.moment().isoformat(timespec="seconds")


class Evolution:
    """The change records of one civilization."""

    def __init__(self, shared_dir: Path, citizens: list[str], enforce_identity: bool, *,
                 code_dirs: Mapping[str, Path] | None = None,
                 merge_request: MergeRequest | None = None,
                 draw_request: MergeRequest | None = None,
                 reviewers: int = change_rules.REVIEWERS) -> None:
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

    # ------------------------------------------------------------ reading

    def get(self, change_id: str, *, only: str | None = None) -> Change:
        """A change and its valid records; with `only`, the adoptions and declines of
        that citizen alone (what its REVIEW gate asks: a thousand adopters' records read
        by each of a thousand gates made an adoption round cost N² reads).

        :raises NotFound: no such change.
        """
        base = self.dir / change_id
        if not (base / "announce.json").exists():
            raise NotFound(f"no change {change_id} - see code_pending_reviews or "
                                 "code_status for the known ones")
        announce = records.read(base / "announce.json", None, self.enforce,
                                accept=whole_announcement)
        if announce is None:
            raise NotAllowed(f"the announcement of {change_id} is broken or not its "
                             "author's; it is ignored (the log says why)")
        change = Change(citizen=announce[records.AUTHOR], **{k: announce[k] for k in (
            "id", "commit", "files", "description", "expected_outcome", "announced")})
        self._reviewers(change)
        for kind in ("reports", "adoptions", "declines"):
            mine = base / kind / f"{only}.json"
            found = ([mine] if mine.is_file() else []) if only and kind != "reports" \
                else sorted((base / kind).glob("*.json"))
            for path in found:
                record = records.read(path, path.stem, self.enforce, by_name=True)
                if record is not None:
                    getattr(change, kind)[path.stem] = record
        # Only the runs the reports cite are read: a flood of run files costs no reader.
        for report in change.reports.values():
            ref = report.get("run")
            if isinstance(ref, str) and RUN_NAME.match(ref) and ref not in change.runs:
                run = records.read(base / RUNS / f"{ref}.json", None, self.enforce)
                if run is not None:  # its author is its file's owner (server mode)
                    change.runs[ref] = run
        # Only the broker's record counts (a merged.json in the change's folder is anyone's).
        change.merged = base_records.read_merged(self.shared, change_id, self.enforce)
        return change

    def _reviewers(self, change: Change) -> None:
        """Who is asked to review `change`, in order: the broker's draw (on a server only
        a draw its user filed counts; none yet: nobody is asked). Without a broker (the
        commons used alone, in dev mode) the order is the change id's hash order."""
        peers = set(self.citizens) - {change.citizen}
        drawn = draws.read(self.shared, change.id, self.enforce)
        if drawn is not None:
            change.order = [n for n in drawn["order"] if n in peers]  # current citizens
            change.k, change.drawn = int(drawn["k"]), str(drawn["drawn"])
        elif not self.enforce:
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
            "order": change_rules.rank(seed, change_id, peers, load, relevant & peers)})

    def changes(self, *, only: str | None = None) -> list[Change]:
        if not self.dir.is_dir():
            return []
        out = []
        for p in sorted(p for p in self.dir.iterdir() if (p / "announce.json").exists()):
            with contextlib.suppress(NotAllowed):  # a broken one hides no other (get logs)
                out.append(self.get(p.name, only=only))
        return out

    # ------------------------------------------------------------ steps

    def announce(self, citizen: str, repo: Path, description: str,
                 expected_outcome: str) -> Change:
        """Announce the commit at the head of `repo` (the citizen's ~/code)."""
        head = gitsafe.out(repo, "rev-parse", "--verify", "HEAD^{commit}")
        change_id = f"{citizen}-{head[:10]}"
        if (self.dir / change_id).exists():
            raise NotAllowed(f"commit {head[:10]} is already announced as "
                                 f"{change_id}")
        # Plumbing: no textconv or external diff; a root commit lists no files, as before.
        files = sorted(gitsafe.out(repo, "diff-tree", "--no-commit-id", "--name-only", "-r",
                                   "--no-renames", head).splitlines())
        # First the objects, then the announcement that names them.
        bundles.publish(repo, head, self.dir / change_id / BUNDLE, self.dir, self.baseline)
        records.write(self.dir, self.dir / change_id / "announce.json", citizen, {
            "id": change_id, "commit": head, "files": files,
            "description": description, "expected_outcome": expected_outcome,
            "announced": _now()})
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
        path = records.add(self.dir, self.dir / change_id / RUNS, citizen, {
            "change": change_id, "commit": self.get(change_id).commit, "command": command,
            "exit_status": exit_status, "started": started, "ended": _now()})
        return path.stem

    def latest_run(self, change: Change, citizen: str) -> tuple[str, dict[str, Any]] | None:
        """`citizen`'s newest valid run record of `change`'s commit (name, record)."""
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
        records.write(self.dir, self.dir / change_id / "reports" / f"{citizen}.json", citizen,
                      record)
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
        records.write(self.dir, self.dir / change_id / "declines" / f"{citizen}.json", citizen,
                    {"reason": reason, "ts": _now()})
        return self.get(change_id)

    def fetch(self, change: Change, into: Path) -> None:
        """Bring the change's commit from its author's repository into `into`.

        The author's repository is read as an object store; git runs only in `into`
        (never in a peer's repository as the caller - see `shared.gitsafe`).
        """
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
        new_head = _cherry_pick(repo_path, change, citizen)
        records.write(self.dir, self.dir / change_id / "adoptions" / f"{citizen}.json", citizen,
                    {"commit": new_head, "ts": _now()})
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
        change = self.get(change_id)
        if change.merged:
            return str(change.merged["baseline_commit"])
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
        stray = base_records.unreviewed(self.baseline, self.shared, self.enforce)
        if stray:
            raise NotAllowed(
                f"the baseline's main carries {len(stray)} commit(s) no review put there "
                f"({', '.join(c[:12] for c in stray[:5])}); nothing is merged on top until "
                "the operator moves main back to the last reviewed commit")
        bundles.unbundle(self.dir / change.id / BUNDLE, change.id, change.citizen,
                         change.commit, baseline=self.baseline, enforce=self.enforce)
        new_head = _cherry_pick(self.baseline, change, by)
        base_records.write_merged(self.shared, change.id, {
            "change": change.id, "baseline_commit": new_head, "by": by, "ts": _now(),
            "holders": sorted(change.holders()),
            # What verified it: each counted reporter's run (the audit trail).
            "verified_by": {who: change.reports[who].get("run") for who in change.counted}})
        log.info("change %s merged into the baseline as %s", change.id, new_head[:12])
        return new_head

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


def _cherry_pick(repo: Path, change: Change, committer: str) -> str:
    # A finished merge (the upgrade's) leaves .git/AUTO_MERGE: nothing is under way here
    # (a cherry-pick is aborted on conflict), so the leftover goes.
    (repo / ".git" / "AUTO_MERGE").unlink(missing_ok=True)
    # The author stays the change's author; the one applying it commits it.
    who = {"GIT_COMMITTER_NAME": committer, "GIT_COMMITTER_EMAIL": f"{committer}@experience.local"}
    # umask 022: what the broker writes into the baseline every citizen reads, none writes.
    picked = gitsafe.run(repo, "cherry-pick", "--allow-empty", "--keep-redundant-commits",
                         change.commit, extra_env=who, check=False, umask=0o022)
    if picked.returncode != 0:
        conflicted = gitsafe.out(repo, "diff", "--name-only", "--diff-filter=U").split()
        gitsafe.run(repo, "cherry-pick", "--abort", umask=0o022)
        raise AdoptConflict(
            f"{change.id} conflicts with {repo} in {', '.join(conflicted) or '?'}; "
            "the cherry-pick was aborted and nothing changed - resolve by hand or skip it "
            f"({picked.stderr.decode(errors='replace').strip()[:200]})")
    return gitsafe.out(repo, "rev-parse", "HEAD")


def divergence(repo_path: Path, baseline: Path, *, reader: Path | None = None) -> list[str]:
    """Files in which `repo_path` differs from the baseline's head.

    git runs in `reader` (the caller's own repository; default `repo_path` itself) and
    reads `repo_path` and the baseline as object stores: a peer's repository or the
    baseline is never opened by a git process (`shared.gitsafe`).
    """
    reader = reader or repo_path
    head = (gitsafe.out(reader, "rev-parse", "--verify", "HEAD") if repo_path == reader
            else gitsafe.read_head(repo_path))
    return gitsafe.diff_names(reader, (baseline, gitsafe.read_head(baseline)),
                              (repo_path, head))
