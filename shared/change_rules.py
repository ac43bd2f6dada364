"""The rules of code evolution, pure: which reports count, what they verify, when 2/3 hold.

No I/O (`tests/test_evolution_runs.py` holds it to the same imports as the other rules
modules): `shared.changes` and `shared.evolution` read the records and ask here.

- **A report rests on a run.** "worked" and "failed" count only when the report names a
  test-run record of the change's commit written by the reporter (the record's author,
  which its reader took from the file's owner) whose exit status agrees: "worked" on exit
  0, "failed" on any other. "unclear" needs no run. The author's own reports never count.
- **A split does not verify.** Two or more counted reports of one verdict verify the
  change only when no counted report says the other: every run is of the same commit
  with the operator's same command on the same server, so runs that disagree show that
  the result depends on something besides the change (a flaky test, a sandbox, a lie) -
  the change is closed as unresolved, with who said what; a reviewer that re-runs
  replaces its report, and the status follows.
- **2/3 of the citizens hold it, the author counted.** The author runs its change, so it
  holds it; the baseline takes a change once the author and its adopters are 2/3 of the
  citizens (rounded up), and always at least one peer has adopted. From 4 citizens on,
  that is the same count as 2/3 of the peers; at 3 it is one peer, not both - requiring
  both would give each single peer a veto (a civilization of three where one holds out,
  or declines, could never evolve).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["OUTCOMES", "REPORTS_TO_VERIFY", "adopters_needed", "agrees", "counted",
           "held_enough", "verdict"]

OUTCOMES = ("worked", "failed", "unclear")
REPORTS_TO_VERIFY = 2  # the seed's "2+ matching reports"
RUN_BACKED = ("worked", "failed")  # the verdicts a test run must back
AUTHOR = "author"  # the key naming a record's author (shared.records.AUTHOR)


def agrees(outcome: str, exit_status: object) -> bool:
    """Whether a verdict agrees with a run's exit status: worked on 0, failed on any
    other; a run with no integer status (it never finished) backs neither."""
    if isinstance(exit_status, bool) or not isinstance(exit_status, int):
        return False
    return (exit_status == 0) if outcome == "worked" else (exit_status != 0)


def backing(report: Mapping[str, Any], reporter: str, commit: str,
            runs: Mapping[str, Mapping[str, Any]]) -> str:
    """Why `report` does not count ("" when it does): `runs` are the run records read
    (author from the file's owner), by the name a report cites them under."""
    outcome = report.get("outcome")
    if outcome not in OUTCOMES:
        return f"'{outcome}' is no outcome"
    if outcome not in RUN_BACKED:
        return ""
    ref = report.get("run")
    run = runs.get(ref) if isinstance(ref, str) else None
    if run is None:
        return f"'{outcome}' cites no test run of its reporter's"
    problems = [
        (run.get(AUTHOR) != reporter, f"the run it cites is {run.get(AUTHOR)}'s, not "
                                      f"{reporter}'s"),
        (run.get("commit") != commit, f"the run it cites tested "
                                      f"{str(run.get('commit'))[:12]}, not {commit[:12]}"),
        (not agrees(str(outcome), run.get("exit_status")),
         f"'{outcome}' contradicts its run's exit status {run.get('exit_status')}")]
    return next((why for bad, why in problems if bad), "")


def counted(reports: Mapping[str, Mapping[str, Any]], author: str, commit: str,
            runs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """reporter -> outcome, for the reports that count (never the author's own)."""
    return {who: str(r["outcome"]) for who, r in reports.items()
            if who != author and not backing(r, who, commit, runs)}


def verdict(outcomes: Mapping[str, str]) -> tuple[str, str]:
    """(status, why) from the counted outcomes: verified_good, verified_failed, split or
    "" (no verdict yet; the caller decides between pending, unresolved and expired)."""
    worked = sorted(w for w, o in outcomes.items() if o == "worked")
    failed = sorted(w for w, o in outcomes.items() if o == "failed")
    if worked and failed:
        return "split", (f"the peers' test runs disagree (worked: {', '.join(worked)}; "
                         f"failed: {', '.join(failed)}) - a result that depends on who runs "
                         "it is no verdict: find why (a flaky test, the environment)")
    if len(worked) >= REPORTS_TO_VERIFY:
        return "verified_good", ""
    if len(failed) >= REPORTS_TO_VERIFY:
        return "verified_failed", ""
    return "", ""


def adopters_needed(citizens: int) -> int:
    """How many of the author's peers must adopt before the baseline takes a change, in
    a civilization of `citizens` (the author among them): the seeds' 2/3 of the citizens,
    rounded up, the author counted - it runs its change - and always at least one peer.
    At 4 citizens and more this is the same number as 2/3 of the peers; at 3 it is one
    peer, not both (requiring both would give each single peer a veto: one that holds
    out, or declines, stops a civilization of three from evolving at all)."""
    return max(_two_thirds(citizens) - 1, 1)


def _two_thirds(peers: int) -> int:
    return -(-2 * peers // 3)  # integer ceiling: no float edge at any size


def held_enough(citizens: frozenset[str] | set[str], author: str,
                adopters: frozenset[str] | set[str]) -> bool:
    """Whether enough of the author's peers (current citizens only) adopted the change."""
    peers = set(citizens) - {author}
    return len(peers) > 0 and len(set(adopters) & peers) >= adopters_needed(len(citizens))
