"""One announced code change and what its records make of it (its derived status).

Pure over the records `shared.evolution` reads (the world clock aside): verified by two
matching peer reports that rest on their reporters' test runs and that no counted report
contradicts (`shared.change_rules`), closed when no verdict can come, and which
announcements are whole enough to read at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared import change_rules, clock
from shared.change_rules import OUTCOMES, REPORTS_TO_VERIFY

__all__ = ["CLOSED", "OUTCOMES", "PENDING_DAYS", "REPORTS_TO_VERIFY", "Change",
           "whole_announcement"]
# A change nobody settles closes instead of waiting forever (issue 30): as "unresolved"
# when two peers report "unclear" (the seed's 2 matching reports, agreeing they cannot
# tell) or when every peer has reported without two agreeing (no reviewer is left to
# break the split); as "expired" when still pending this many days after its
# announcement. A closed change leaves every review list (no paid wake keeps coming
# back to it); a peer may still re-report, and two matching outcomes verify it after all.
PENDING_DAYS = 14
CLOSED = ("unresolved", "expired")


@dataclass
class Change:
    """One announced change with every valid record filed about it."""

    id: str
    citizen: str
    commit: str
    files: list[str]
    description: str
    expected_outcome: str
    announced: str
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    adoptions: dict[str, dict[str, Any]] = field(default_factory=dict)
    declines: dict[str, dict[str, Any]] = field(default_factory=dict)  # held out, with why
    merged: dict[str, Any] | None = None
    # The peers in the order they are asked to review (the broker's draw, current
    # citizens only), how many at once, and when the first k were asked (ISO time).
    order: list[str] = field(default_factory=list)
    k: int = change_rules.REVIEWERS
    drawn: str = ""
    # The test-run records the reports cite, by the name cited (author = file's owner).
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def backed(self) -> dict[str, str]:
        """reporter -> outcome of every report its run backs, drawn or not."""
        return change_rules.counted(self.reports, self.citizen, self.commit, self.runs)

    def answered(self) -> dict[str, float]:
        """reporter -> when (world epoch) of the backed reports."""
        out = {}
        for who in self.backed:
            try:
                out[who] = clock.epoch(str(self.reports[who].get("ts")))
            except ValueError:
                out[who] = clock.time()  # no readable time: as if it came just now
        return out

    @property
    def reviewers(self) -> list[str]:
        """The peers asked to review so far, in order (`shared.change_rules.assigned`):
        the first k of the draw, each replaced when silent past the deadline, and one
        more while all answered without a verdict. [] before the broker's draw."""
        if not self.order or not self.drawn:
            return []
        answered, now, drawn = self.answered(), clock.time(), clock.epoch(self.drawn)
        first = change_rules.assigned(self.order, self.k, drawn, answered, now=now,
                                      undecided=False)
        status, _ = change_rules.verdict({w: o for w, o in self.backed.items() if w in first})
        unclear = [w for w in first if self.backed.get(w) == "unclear"]
        if status or len(unclear) >= REPORTS_TO_VERIFY:
            return first
        return change_rules.assigned(self.order, self.k, drawn, answered, now=now)

    @property
    def counted(self) -> dict[str, str]:
        """reporter -> outcome of the reports that count: backed by the reporter's own
        agreeing run, from a drawn reviewer (`shared.change_rules`)."""
        drawn = set(self.reviewers)
        return {w: o for w, o in self.backed.items() if w in drawn}

    @property
    def status(self) -> str:
        """merged, verified_good, verified_failed, unresolved, expired or pending -
        derived from the reports, the citizens and the world clock (see PENDING_DAYS)."""
        return self._settled()[0]

    def _settled(self) -> tuple[str, str]:
        """(status, why) - why a change is closed, "" otherwise."""
        if self.merged:
            return "merged", ""
        peers = self.counted
        outcomes = list(peers.values())
        status, why = change_rules.verdict(peers)
        if status == "split":
            return "unresolved", (f"{why}; a reviewer that re-runs replaces its report - "
                                  "or fix it and announce it again")
        if status:
            return status, ""
        if outcomes.count("unclear") >= REPORTS_TO_VERIFY:
            why = "two peers could not tell whether it works; make it testable"
        elif self.order and set(self.order) <= set(peers):
            why = f"no reviewer is left and no two agree ({', '.join(sorted(outcomes))})"
        elif clock.time() - clock.epoch(self.announced) > PENDING_DAYS * 86400:
            return "expired", (f"pending more than {PENDING_DAYS} days; announce it again "
                               "if it still matters")
        else:
            return "pending", ""
        return "unresolved", f"{why}; read the notes, fix it and announce it again"

    def holders(self) -> set[str]:
        """Citizens who have the change: its author and every adopter."""
        return {self.citizen, *self.adoptions}

    def summary(self) -> dict[str, Any]:
        status, why = self._settled()
        return {"id": self.id, "citizen": self.citizen, "commit": self.commit[:12],
                "files": self.files, "description": self.description,
                "expected_outcome": self.expected_outcome, "status": status,
                **({"closed_because": why} if why else {}),
                "reports": {c: r["outcome"] for c, r in self.reports.items()},
                # Filed but not counted, and why (no run behind it, a run that disagrees).
                "reviewers": self.reviewers,
                "not_counted": {c: self._why_not(c, r) for c, r in self.reports.items()
                                if c not in self.counted},
                "adopted_by": sorted(self.adoptions), "declined_by": sorted(self.declines)}


    def _why_not(self, who: str, report: dict[str, Any]) -> str:
        if who == self.citizen:
            return "the author's own"
        return (change_rules.backing(report, who, self.commit, self.runs)
                or "not one of the reviewers the broker drew for it")


FUTURE_SKEW_S = 3600  # Why: a civilization's processes share the world clock; slack


def whole_announcement(data: dict[str, Any]) -> bool:
    """An announcement its readers can use: fields of their types, dated no later than
    now (its author writes the date: one that is no date broke every listing, one in the
    future kept the change from ever expiring)."""
    files, text = data.get("files"), ("id", "commit", "description", "expected_outcome")
    try:
        return (all(isinstance(data.get(k), str) for k in text) and isinstance(files, list)
                and all(isinstance(f, str) for f in files) and isinstance(
                    data.get("announced"), str) and clock.epoch(data["announced"])
                <= clock.time() + FUTURE_SKEW_S)
    except ValueError:
        return False
