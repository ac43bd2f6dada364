"""A change's records as rows the civilization's database keeps (several servers).

`shared.evolution` keeps a change's records as files under `shared/changes/<id>/` on a
server of its own; given a `shared.remote.Remote` it keeps the same records under the
same names as keys through this server's broker, so a change announced on one server is
reviewed and adopted on another:

    changes/<id>/announce.json        created once by the author
    changes/<id>/change.bundle        created once by the author: {"bundle": base64}
    changes/<id>/runs/<name>.json     created once by the runner
    changes/<id>/reports/<who>.json   rewritten by `who` alone (the keeper's rule)
    changes/<id>/adoptions|declines/<who>.json

Authorship is the row's author - the caller the kernel named to the writing server's
broker, and a citizen of that server, or the database refuses the row - exactly what a
file's owner proves on one server: a record whose name says whose it is counts only when
its row is that citizen's, and a run counts for its row's author alone. Each author
writes in a namespace of its own (a record is keyed by its place and its author,
`shared.remote`), so every read names the author it believes: the announcement's and
the bundle's is the citizen the change id names (`<citizen>-<commit>`), a run's the one
its name does, a report's the one it is named for - a peer's row at such a place is
the peer's, never taken for the named one's, and never keeps it from writing.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared import baseline, bundles, clock, gitsafe
from shared.changes import Change, whole_announcement
from shared.errors import NotAllowed, NotFound
from shared.records import AUTHOR
from shared.remote import Remote, Taken

log = logging.getLogger(__name__)

ROOT = "changes"
KINDS = ("reports", "adoptions", "declines")
RUNS = "runs"  # test-run records, one each, the runner's
RUN_NAME = re.compile(r"^[0-9]{8}T[0-9]{12}-[a-z][a-z0-9_-]{0,30}-[0-9a-f]{8}$")  # add's


class ChangeRows:
    """The records of every change, through `remote` (keys relative to the commons)."""

    def __init__(self, remote: Remote) -> None:
        self.remote = remote

    @staticmethod
    def key(change_id: str, *names: str) -> str:
        return "/".join((ROOT, change_id, *names))

    def _mine(self, citizen: str) -> None:
        # The keeper stamps its caller as the author anyway; refused here, it says why.
        if citizen != self.remote.citizen:
            raise NotAllowed(f"{self.remote.citizen} cannot write a record in {citizen}'s "
                             "name")

    # ------------------------------------------------------------ reading

    def change(self, change_id: str, only: str | None,
               announced: Callable[[str, dict[str, Any] | None], Change]) -> Change:
        """`shared.evolution.Evolution.get` from the rows (`announced` makes the change
        of a whole announcement, its reviewers drawn): the same records, each author its
        row's."""
        announce = self.announcement(change_id)
        if announce is None:
            raise NotFound(f"no change {change_id} - see code_pending_reviews or "
                           "code_status for the known ones")
        change = announced(change_id, announce if whole_announcement(announce) else None)
        for kind in KINDS:
            getattr(change, kind).update(self.by_name(
                change_id, kind, only if kind != "reports" else None))
        for report in change.reports.values():  # only the runs the reports cite
            ref = report.get("run")
            if isinstance(ref, str) and RUN_NAME.match(ref) and ref not in change.runs:
                run = self.run(change_id, ref)
                if run is not None:
                    change.runs[ref] = run
        change.merged = baseline.read_merged(Path(), change_id, True, self.remote)
        return change

    def ids(self) -> list[str]:
        return sorted(self.remote.folders(ROOT))

    def announcement(self, change_id: str) -> dict[str, Any] | None:
        """The announcement's fields with its row's author (None: no such change)."""
        author = author_of(change_id)
        row = self.remote.read(self.key(change_id, "announce.json"), author)
        if row is None or row.get("author") != author or not isinstance(row.get("data"), dict):
            return None
        return {**row["data"], AUTHOR: str(row["author"])}

    def by_name(self, change_id: str, kind: str, only: str | None = None
                ) -> dict[str, dict[str, Any]]:
        """`kind`'s records (reports, adoptions, declines) by the citizen named, each
        only if its row is that citizen's; with `only`, that citizen's alone."""
        if only is not None:
            row = self.remote.read(self.key(change_id, kind, f"{only}.json"), only)
            rows = [row] if row is not None else []
        else:
            rows = self.remote.records(self.key(change_id, kind))
        out: dict[str, dict[str, Any]] = {}
        for row in rows:
            name = str(row.get("key", "")).rpartition("/")[2].removesuffix(".json")
            if row.get("author") != name or not isinstance(row.get("data"), dict):
                log.info("ignoring %s by %s: a record in %s's name is %s's alone",
                         row.get("key"), row.get("author"), name, name)
                continue
            out[name] = {**row["data"], AUTHOR: name}
        return out

    def run(self, change_id: str, name: str) -> dict[str, Any] | None:
        """A test run by the name a report cites, its author the row's."""
        runner = runner_of(name)
        row = self.remote.read(self.key(change_id, RUNS, f"{name}.json"), runner)
        if row is None or row.get("author") != runner or not isinstance(row.get("data"), dict):
            return None
        return {**row["data"], AUTHOR: str(row["author"])}

    def latest_run(self, change_id: str, citizen: str, commit: str
                   ) -> tuple[str, dict[str, Any]] | None:
        """`citizen`'s newest run of `commit` (name, record): its rows, newest first."""
        rows = [r for r in self.remote.records(self.key(change_id, RUNS))
                if r.get("author") == citizen and isinstance(r.get("data"), dict)]
        for row in sorted(rows, key=lambda r: str(r["key"]), reverse=True)[:50]:
            if row["data"].get("commit") == commit:
                name = str(row["key"]).rpartition("/")[2].removesuffix(".json")
                return name, {**row["data"], AUTHOR: citizen}
        return None

    # ------------------------------------------------------------ writing

    def announce(self, citizen: str, repo: Path, baseline: Path,
                 record: dict[str, Any]) -> None:
        """The bundle of the commit, then the announcement that names it, each once.

        :raises NotAllowed: announced already, or a bundle too big to travel.
        """
        self._mine(citizen)
        change_id = str(record["id"])
        encoded = bundles.encode(repo, str(record["commit"]), change_id, baseline)
        # Taken: ours from an announcement that failed after it (the id names the commit).
        with contextlib.suppress(Taken):
            self.remote.create(self.key(change_id, bundles.BUNDLE),
                               {"change": change_id, "commit": record["commit"],
                                "bundle": encoded})
        try:
            self.remote.create(self.key(change_id, "announce.json"), record)
        except Taken as exc:
            raise NotAllowed(f"commit {str(record['commit'])[:10]} is already announced as "
                             f"{change_id}") from exc

    def add_run(self, change_id: str, citizen: str, record: dict[str, Any]) -> str:
        """A new run record of `citizen`'s; the name a report cites it by."""
        self._mine(citizen)
        for _ in range(8):
            name = f"{clock.moment():%Y%m%dT%H%M%S%f}-{citizen}-{secrets.token_hex(4)}"
            try:
                self.remote.create(self.key(change_id, RUNS, f"{name}.json"), record)
            except Taken:
                continue  # a name is drawn again, never replaced
            return name
        raise NotAllowed(f"no free name for a run of {change_id}; run code_test again")

    def write(self, change_id: str, kind: str, citizen: str, record: dict[str, Any]) -> None:
        """`citizen`'s record of `kind` (a report, an adoption, a decline), rewritten by
        it alone."""
        self._mine(citizen)
        self.remote.write(self.key(change_id, kind, f"{citizen}.json"), record)

    # ------------------------------------------------------------ objects

    def take_objects(self, change_id: str, author: str, commit: str, into: Path) -> None:
        """The change's commit, from its author's bundle record, into `into` (the
        caller's own repository, or the broker's baseline).

        :raises NotFound: no bundle of the author's, or it lacks the commit.
        """
        row = self.remote.read(self.key(change_id, bundles.BUNDLE), author)
        if row is None or row.get("author") != author or not isinstance(row.get("data"), dict):
            raise NotFound(f"{change_id} has no bundle of {author}'s; {author} announces it "
                           "again")
        if gitsafe.run(into, "cat-file", "-e", f"{commit}^{{commit}}",
                       check=False).returncode == 0:
            return  # already there (a second adoption, a merge asked again)
        bundles.unpack(row["data"].get("bundle"), change_id, author, commit, into=into)



def author_of(change_id: str) -> str:
    """The citizen a change id names (`<citizen>-<commit's first 10>`)."""
    return change_id.rpartition("-")[0]


def runner_of(name: str) -> str:
    """The citizen a run's name names (`<time>-<citizen>-<random>`)."""
    return name.partition("-")[2].rpartition("-")[0]
