"""The shared library: knowledge modules proposed by one citizen, approved by peers.

`library/pending/<id>.json` is a proposal (its file owned by its maintainer);
`library/pending/<id>.<round>.reviews/<citizen>.json` are reviews (each owned by its
reviewer); once `approvals` peers approve, the module moves to `library/modules/`
(a new version when it replaces an older one). One peer's reasoned rejection rejects
it - every citizen loads published modules as trusted knowledge, so one informed
objection outweighs a quorum of approvals (the seed is silent) - and it leaves the
pending list for `rejected()`, with the reasons, until its maintainer proposes it
again. Each proposal carries a `round`, and its reviews live in that round's own
directory, so a re-proposal starts with no reviews and a published version keeps
the ones that approved it. Search is full-text (SQLite FTS5) over an index built from
the module files on each search - derived, never stale.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared import clock, records
from shared.atomic import CorruptFile, read_json
from shared.errors import Invalid, NotAllowed, NotFound
from shared.layout import Layout
from shared.records import id_pattern

log = logging.getLogger(__name__)
ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,60}$")
ROUND_RE = id_pattern("round")
DECISIONS = ("approve", "reject")




@dataclass
class Review:
    citizen: str
    decision: str
    note: str


def _now() -> str:
    return clock.moment().isoformat(timespec="seconds")


class Library:
    """The library of one civilization."""

    def __init__(self, shared_dir: Path, approvals: int, enforce_identity: bool) -> None:
        self.dir = Layout(shared_dir).library
        self.approvals = approvals
        self.enforce = enforce_identity

    def published(self) -> list[dict[str, Any]]:
        """Every module that really was approved (see `_approved`), by id."""
        out = []
        for path in sorted((self.dir / "modules").glob("*.json")):
            module = self._approved(path)
            if module is not None:
                out.append(module)
        return out

    def _approved(self, path: Path) -> dict[str, Any] | None:
        """The module in `path` if its approvals hold: enough approving reviews, each its
        reviewer's own record, none by the maintainer, and (in server mode) the file
        written by one of them. A file placed in `modules/` by anyone else - the
        directory is group-writable - is ignored (logged), never loaded."""
        try:
            module: dict[str, Any] = read_json(path)
        except CorruptFile as exc:
            log.warning("ignoring %s: %s", path, exc)
            return None
        approvers = [str(c) for c in module.get("approved_by", [])
                     if c != module.get("maintainer")]
        reviews = {r.citizen: r.decision
                   for r in self.reviews(str(module.get("id", "")), module.get("round"))}
        real = [c for c in approvers if reviews.get(c) == "approve"]
        if len(set(real)) < self.approvals:
            log.warning("ignoring %s: %d real approvals of %d needed", path, len(set(real)),
                        self.approvals)
            return None
        # legacy=(): a module names its maintainer, but its file is the publishing approver's.
        if self.enforce and not any(records.read(path, c, True, legacy=(), by_name=True)
                                    is not None for c in real):
            return None  # not written by an approver (read logs why)
        return module

    def modules(self, domain: str = "") -> list[dict[str, Any]]:
        """Approved modules (summaries), optionally of one domain."""
        out = []
        for module in self.published():
            if not domain or module["domain"] == domain:
                out.append({k: module[k] for k in ("id", "domain", "summary", "version",
                                                     "maintainer")})
        return out

    def load(self, module_id: str) -> dict[str, Any]:
        path = self.dir / "modules" / f"{module_id}.json"
        module = self._approved(path) if path.exists() else None
        if module is None:
            raise NotFound(f"no approved module {module_id} - see library_list")
        return module

    def propose(self, citizen: str, module_id: str, domain: str, summary: str,
                content: str) -> dict[str, Any]:
        """Propose a new module, or a new version of one you maintain."""
        if not ID_RE.match(module_id):
            raise Invalid("a module id is 2-61 lowercase letters, digits, '-' or '_'")
        pending = self.dir / "pending" / f"{module_id}.json"
        waiting = read_json(pending) if pending.exists() else None
        if waiting is not None and not self._rejections(waiting) and not self._done(waiting):
            raise NotAllowed(f"{module_id} is already waiting for review")
        current = self.dir / "modules" / f"{module_id}.json"
        version = 1
        if current.exists():
            old = read_json(current)
            if old["maintainer"] != citizen:
                raise NotAllowed(f"{module_id} is maintained by {old['maintainer']}; "
                                   "propose a module of your own or ask them")
            version = int(old["version"]) + 1
        if waiting is not None and waiting["maintainer"] != citizen and not self._done(waiting):
            raise NotAllowed(f"{module_id} was proposed by {read_json(pending)['maintainer']} "
                             "and rejected; propose it under another id")
        module = {"id": module_id, "domain": domain, "summary": summary, "content": content,
                  "version": version, "maintainer": citizen, "proposed": _now(),
                  "round": records.new_id("round")}
        return records.write(self.dir, pending, citizen, module)

    def _proposals(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted((self.dir / "pending").glob("*.json")):
            # A proposal's author is its maintainer (older ones named only the maintainer).
            module = records.read(path, None, self.enforce, legacy=("maintainer",),
                                  accept=lambda m: m.get("maintainer") == m[records.AUTHOR])
            if module is not None and not self._done(module):
                out.append(module)
        return out

    def _done(self, module: dict[str, Any]) -> bool:
        """Whether this proposal round was published (its pending file may outlive it: on a
        server the reviewer who publishes cannot remove the maintainer's file)."""
        current = self.dir / "modules" / f"{module['id']}.json"
        if not current.exists():
            return False
        published = read_json(current)
        return (published.get("round"), published.get("version")) == (
            module.get("round"), module.get("version"))

    def _rejections(self, module: dict[str, Any]) -> list[Review]:
        return [r for r in self.reviews(module["id"], module.get("round"))
                if r.decision == "reject" and r.citizen != module["maintainer"]]

    def pending(self) -> list[dict[str, Any]]:
        """Proposals waiting for review (none a peer rejected), with their reviews."""
        out = []
        for module in self._proposals():
            if self._rejections(module):
                continue
            reviews = self.reviews(module["id"], module.get("round"))
            out.append({**{k: module[k] for k in ("id", "domain", "summary", "maintainer",
                                                  "version")},
                        "reviews": {r.citizen: r.decision for r in reviews}})
        return out

    def awaiting(self, citizen: str) -> list[dict[str, Any]]:
        """Pending proposals of peers that `citizen` has not reviewed yet."""
        return [p for p in self.pending()
                if p["maintainer"] != citizen and citizen not in p["reviews"]]

    def rejected(self, maintainer: str = "") -> list[dict[str, Any]]:
        """Proposals a peer rejected (optionally one maintainer's), with the reasons.

        The state is derived from the reviews, not stored by moving the file: the pending
        directory is sticky, so a reviewer cannot move or delete the maintainer's file."""
        out = []
        for module in self._proposals():
            rejections = self._rejections(module)
            if rejections and (not maintainer or module["maintainer"] == maintainer):
                out.append({**{k: module.get(k) for k in ("id", "domain", "summary",
                                                          "maintainer", "version", "round")},
                            "rejected_by": {r.citizen: r.note for r in rejections}})
        return out

    def _reviews_dir(self, module_id: str, round_: str | None) -> Path:
        # None: a module proposed before rounds existed kept its reviews in one directory
        name = f"{module_id}.{round_}.reviews" if round_ else f"{module_id}.reviews"
        return self.dir / "pending" / name

    def reviews(self, module_id: str, round_: str | None = None) -> list[Review]:
        """The reviews of proposal round `round_` of `module_id`."""
        if round_ is not None and not ROUND_RE.match(str(round_)):
            return []  # a round is a path part: one not of our making counts no reviews
        found = []
        for path in sorted(self._reviews_dir(module_id, round_).glob("*.json")):
            data = records.read(path, path.stem, self.enforce, by_name=True)
            if data is None:
                continue  # a forged or broken review never counts
            found.append(Review(path.stem, data["decision"], data.get("note", "")))
        return found

    def review(self, citizen: str, module_id: str, decision: str, note: str) -> str:
        """Review a proposal; the approval that reaches the threshold publishes it."""
        if decision not in DECISIONS:
            raise Invalid(f"decision must be {' or '.join(DECISIONS)}")
        if decision == "reject" and not note.strip():
            raise Invalid("a rejection needs a note: say what the maintainer should change")
        pending = self.dir / "pending" / f"{module_id}.json"
        if not pending.exists():
            raise NotFound(f"no proposal {module_id} - see library_pending")
        module = read_json(pending)
        if self._done(module):
            raise NotFound(f"{module_id} version {module.get('version')} is already published")
        if module["maintainer"] == citizen:
            raise NotAllowed("nobody reviews their own module")
        if self._rejections(module):
            raise NotAllowed(f"{module_id} was rejected; it waits for its maintainer to "
                             "propose it again")
        reviews_dir = self._reviews_dir(module_id, module.get("round"))
        records.write(self.dir, reviews_dir / f"{citizen}.json", citizen,
                      {"decision": decision, "note": note, "ts": _now()})
        if decision == "reject":
            return (f"{module_id}: rejected ({note.strip()}); it leaves the pending list "
                    f"until {module['maintainer']} proposes it again")
        approvals = [r for r in self.reviews(module_id, module.get("round"))
                     if r.decision == "approve" and r.citizen != module["maintainer"]]
        if len(approvals) < self.approvals:
            return f"{module_id}: {len(approvals)} of {self.approvals} approvals"
        published = {**module, "approved_by": sorted(r.citizen for r in approvals),
                     "published": _now()}
        records.write(self.dir, self.dir / "modules" / f"{module_id}.json", citizen, published)
        with contextlib.suppress(PermissionError):
            # The maintainer's file in the sticky pending directory: on a server only its
            # owner may remove it; the published round hides it from every list (`_done`).
            pending.unlink()
        return f"{module_id}: approved by {', '.join(published['approved_by'])}; published"

    def search(self, query: str, limit: int = 8) -> list[dict[str, Any]]:
        """Full-text search over approved modules."""
        words = re.findall(r"\w+", query)
        if not words:
            return []
        db = sqlite3.connect(":memory:")
        db.execute("CREATE VIRTUAL TABLE m USING fts5(id, domain, summary, content)")
        for module in self.published():
            db.execute("INSERT INTO m VALUES (?, ?, ?, ?)", (module["id"], module["domain"],
                                                            module["summary"],
                                                            module["content"]))
        match = " OR ".join(f'"{w}"' for w in words)  # quoted: user text is never FTS syntax
        rows = db.execute("SELECT id, summary, snippet(m, 3, '[', ']', '…', 16) FROM m "
                          "WHERE m MATCH ? ORDER BY rank LIMIT ?", (match, limit)).fetchall()
        return [{"id": i, "summary": s, "snippet": n} for i, s, n in rows]
