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
- **k reviewers, not everyone.** A change asks for k independent test reports (the
  operator's `evolution.reviewers`, default REVIEWERS, never fewer than the two that
  verify). The broker draws the order once, when the change is announced (`rank`): peers
  sorted by their recent review load, less one for a peer whose focus or strengths name
  the files changed, ties broken by a hash of a random seed the broker drew *after* the
  commit was fixed (so an author cannot grind its commit until the hash picks its
  friends). The first k are rung; only the reports of assigned reviewers count. A
  reviewer that has not reported REVIEW_DEADLINE_S after it was assigned is replaced by
  the next in the order (`assigned`), and so is a full set that answered without a
  verdict (two of k=2 disagreeing by "unclear"). Its late report still counts: it was
  chosen.
- **2/3 of the citizens hold it, the author counted.** The author runs its change, so it
  holds it; the baseline takes a change once the author and its adopters are 2/3 of the
  citizens (rounded up), and always at least one peer has adopted. From 4 citizens on,
  that is the same count as 2/3 of the peers; at 3 it is one peer, not both - requiring
  both would give each single peer a veto (a civilization of three where one holds out,
  or declines, could never evolve).
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["OUTCOMES", "REPORTS_TO_VERIFY", "REVIEWERS", "REVIEW_DEADLINE_S", "adopters_needed",
           "agrees", "assigned", "counted", "held_enough", "rank", "relevant", "verdict"]

OUTCOMES = ("worked", "failed", "unclear")
REPORTS_TO_VERIFY = 2  # the seed's "2+ matching reports"
RUN_BACKED = ("worked", "failed")  # the verdicts a test run must back
AUTHOR = "author"  # the key naming a record's author (shared.records.AUTHOR)
REVIEWERS = 3  # the operator's evolution.reviewers when it sets none (issue 43)
# Why an hour: a rung reviewer's daemon wakes within seconds and a test run takes minutes;
# a reviewer still silent after an hour is down or stuck, and the change should not wait
# for it (its REVIEW slot may be ten wake intervals away).
REVIEW_DEADLINE_S = 3600
LOAD_WINDOW_S = 86400  # review load counts the assignments of the last day (the broker's)
_WORD = re.compile(r"[a-z][a-z0-9]{2,}")


def relevant(files: Iterable[str], focus: str, strengths: Iterable[str]) -> bool:
    """Whether a peer's focus or strengths name a word of the changed files' paths
    (`citizen/wake/review.py` gives citizen, wake, review): a cheap, explainable match."""
    words = {_stem(w) for f in files for w in _WORD.findall(f.lower())} - {"json"}
    said = {_stem(w) for text in (focus, *strengths) for w in _WORD.findall(str(text).lower())}
    return bool(words & said)


def _stem(word: str) -> str:
    """A plural's singular, crudely (both sides alike): "reviews" matches "review"."""
    return word[:-1] if word.endswith("s") and len(word) > 3 else word


def rank(seed: str, change_id: str, peers: Iterable[str], load: Mapping[str, int],
         relevant_peers: Iterable[str] = ()) -> list[str]:
    """The order in which peers are asked to review a change: the least loaded first (a
    relevant peer as if it had one review less), ties by a hash of the broker's random
    `seed` and the change - deterministic given the draw, unpredictable before it."""
    rel = set(relevant_peers)

    def key(peer: str) -> tuple[int, str]:
        mix = hashlib.sha256(f"{seed}\0{change_id}\0{peer}".encode()).hexdigest()
        return int(load.get(peer, 0)) - (peer in rel), mix

    return sorted(set(peers), key=key)


def assigned(order: Sequence[str], k: int, drawn: float, answered: Mapping[str, float], *,
             now: float, undecided: bool = True,
             deadline_s: float = REVIEW_DEADLINE_S) -> list[str]:
    """Every peer assigned to review so far, in the order assigned: the first `k` at
    `drawn`; each that has not `answered` (reporter -> when, world epoch) within
    `deadline_s` of its assignment hands its slot to the next in `order` at that moment;
    and while `undecided`, once every assigned reviewer has answered, one more."""
    k = max(0, min(k, len(order)))
    out = list(order[:k])
    due = [(drawn + deadline_s, i) for i in range(k)]  # (when a slot is due, its holder)
    heapq.heapify(due)
    nxt = k
    while due and nxt < len(order):
        when, i = heapq.heappop(due)
        holder = order[i]
        t = answered.get(holder)
        if (t is not None and t <= when) or now < when:
            continue  # answered in time, or its time is not up
        out.append(order[nxt])
        heapq.heappush(due, (when + deadline_s, nxt))
        nxt += 1
    while undecided and nxt < len(order) and out and all(p in answered for p in out):
        out.append(order[nxt])  # every reviewer answered and no verdict came: one more
        nxt += 1
    return out


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
