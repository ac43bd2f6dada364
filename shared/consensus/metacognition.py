"""Indicator 6, metacognitive depth: how far the collective's words reach about itself.

The seed: "depth of self-referential discussion (agents discussing their processes) ...
measure nesting level of meta-references; should increase over time". Its example climbs
three rungs - "I notice I keep proposing file writes without checking existence" (its own
process), "three of the last five proposals needed revision for this reason" (a pattern
across processes), "add 'check existence' as default step in proposal template" (changing
the process). Each text the records hold - a revision's response to concerns, a vote's
rationale, concerns and suggestions, an integrator's compromise, coherence check and
learnings, an episode's key learnings - gets the highest rung its words reach:

    0  no meta-reference: about the task only;
    1  about its own reasoning or step ("I overlooked", "my review", "on reflection");
    2  about a pattern across proposals or rounds ("again", "the last five proposals",
       "pattern", "tends to");
    3  proposes changing how the collective works: a change word and a process noun in one
       sentence ("add this to the checklist", "from now on", "future proposals should").

The lexicon is English and deliberately plain: a phrase list anyone can audit, not a
model's judgement (which would be one more thing to game or drift). Its misses go both
ways and stay the same from week to week, which is what a trend needs. Computed after the
fact, never shown to a citizen.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from shared import clock
from shared.consensus.rules import Proposal

_OWN = re.compile(
    r"\b(?:i|we)\s+(?:notice|noticed|reali[sz]e|reali[sz]ed|assumed|overlooked|missed|forgot|"
    r"should\s+have|was\s+wrong|were\s+wrong|misjudged|underestimated|"
    r"keep\s+\w+ing|kept\s+\w+ing)\b"
    r"|\b(?:my|our)\s+(?:own\s+)?(?:reasoning|review|proposal|process|assumption|assumptions|"
    r"judg(?:e)?ment|mistake|earlier|previous|approach|vote|check|thinking|bias)\b"
    r"|\bon\s+reflection\b|\bin\s+hindsight\b|\bself-critic", re.IGNORECASE)
_PATTERN = re.compile(
    r"\b(?:pattern|patterns|recurring|repeatedly|habit|habitually|systematically|"
    r"every\s+time|each\s+time|once\s+again|tend(?:s|ed)?\s+to|keeps?\s+(?:happening|"
    r"coming\s+up|recurring))\b"
    r"|\b(?:last|previous|past|earlier|other|recent|several|many)\s+(?:\w+\s+)?"
    r"(?:proposals|episodes|rounds|reviews|decisions|votes)\b"
    r"|\b\w+\s+of\s+the\s+last\s+\w+\b", re.IGNORECASE)
_CHANGE = re.compile(
    r"\b(?:chang(?:e|es|ed|ing)|add(?:s|ed|ing)?|adopt\w*|amend\w*|updat(?:e|es|ed|ing)|"
    r"mak(?:e|es|ing)|record(?:s|ed|ing)?|internali[sz]\w*|introduc\w*|requir\w*|should|"
    r"must)\b", re.IGNORECASE)
# Qualified where the bare word has a technical sense here (a Unix process, an HTTP
# protocol, a file template): only the collective's own ways of working count.
_PROCESS = re.compile(
    r"\b(?:(?:our|review|consensus|decision|proposal|verification)\s+(?:process|protocol|"
    r"template|rules)|checklist|procedure|workflow|default\s+step|patterns\.jsonl|"
    r"how\s+we\s+(?:propose|review|verify|decide|work)|future\s+proposals)\b",
    re.IGNORECASE)
_ALWAYS = re.compile(r"\b(?:from\s+now\s+on|going\s+forward|as\s+a\s+(?:rule|default))\b",
                     re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?;])\s+")


def depth(text: str) -> int:
    """The highest rung (0-3) `text`'s meta-references reach."""
    sentences = _SENTENCE.split(text)
    if _ALWAYS.search(text) or any(_CHANGE.search(s) and _PROCESS.search(s)
                                   for s in sentences):
        return 3
    if _PATTERN.search(text):
        return 2
    return 1 if _OWN.search(text) else 0


def texts(d: Proposal) -> Iterator[tuple[str, str]]:
    """(timestamp, text) of every piece of reasoning in a proposal's records."""
    for rev in d.revisions[1:]:  # a first revision answers no one
        yield rev.get("ts", ""), str(rev.get("response_to_concerns", ""))
    for ver in d.verifications.values():
        yield from _each(ver, ver.get("rationale"), *_strings(ver.get("concerns")),
                         *_strings(ver.get("suggestions")))
    for integ in d.integrations.values():
        compromise = integ.get("compromise")
        check = integ.get("coherence_check")
        yield from _each(integ, integ.get("rationale"), *_strings(integ.get("learnings")),
                         compromise.get("proposed_changes") if isinstance(
                             compromise, Mapping) else compromise,
                         check.get("systemic_impact") if isinstance(check, Mapping) else None)
    if d.episode:
        yield from _each(d.episode, *_strings(d.episode.get("key_learnings")))


def _strings(items: Any) -> list[Any]:
    return list(items) if isinstance(items, list) else []


def _each(record: Mapping[str, Any], *items: Any) -> Iterator[tuple[str, str]]:
    ts = str(record.get("ts") or record.get("timestamp") or "")
    for item in items:
        if isinstance(item, str) and item.strip():
            yield ts, item


def week(ts: str) -> str:
    """The ISO week of a timestamp ("2025-W45"), the unit of the seed's "over time"."""
    year, week, _ = datetime.fromtimestamp(clock.epoch(ts), tz=UTC).isocalendar()
    return f"{year}-W{week:02d}"


def by_week(proposals: Iterable[Proposal]) -> dict[str, Any]:
    """Mean depth per ISO week (every text counts, depth 0 included), the overall mean,
    and the trend: the least-squares slope of the weekly means per week elapsed."""
    weeks: dict[str, list[int]] = defaultdict(list)
    for d in proposals:
        for ts, text in texts(d):
            if ts:
                weeks[week(ts)].append(depth(text))
    table = {w: {"texts": len(v), "mean_depth": round(statistics.fmean(v), 3), "max": max(v)}
             for w, v in sorted(weeks.items())}
    every = [x for v in weeks.values() for x in v]
    return {"by_week": table, "mean": round(statistics.fmean(every), 3) if every else None,
            "trend_per_week": trend({w: row["mean_depth"] for w, row in table.items()}),
            "target": "rising week on week"}


def trend(series: Mapping[str, float]) -> float | None:
    """The least-squares slope of a weekly series per week elapsed (None: under 2 weeks)."""
    if len(series) < 2:
        return None
    return round(statistics.linear_regression(
        [_week_index(w) for w in series], list(series.values())).slope, 3)


def _week_index(week: str) -> int:
    year, w = week.split("-W")
    monday = datetime.fromisocalendar(int(year), int(w), 1)
    return monday.toordinal() // 7
