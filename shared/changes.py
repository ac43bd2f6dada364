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
    reviewers: frozenset[str] = frozenset()  # every citizen but the author
    # The test-run records the reports cite, by the name cited (author = file's owner).
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def counted(self) -> dict[str, str]:
        """reporter -> outcome of the reports that count (`shared.change_rules`)."""
        return change_rules.counted(self.reports, self.citizen, self.commit, self.runs)

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
        elif self.reviewers and self.reviewers <= set(peers):
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
                "not_counted": {c: change_rules.backing(r, c, self.commit, self.runs)
                                or "the author's own" for c, r in self.reports.items()
                                if c not in self.counted},
                "adopted_by": sorted(self.adoptions), "declined_by": sorted(self.declines)}


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
