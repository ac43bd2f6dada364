"""Who grades steelmans too kindly: the plan's risk "Steelmans always graded ACCURATE"
(mitigation: "if >90% ACCURATE, tighten grading prompt") as a check over debates.

A grader is the target of a steelman (it grades how well it was represented). Over every
debate of the commons, a grader with at least `MIN_GRADES` grades who graded more than
`LENIENT` of them ACCURATE is flagged. Pure: replayed debates in, figures out; the store
reads the debates (`Debates.graders`), the CLI shows the figures (`citizen debate
graders`), and a DEBATE wake shows a flagged grader its own figure when it grades.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shared.debates.moves import GRADES
from shared.debates.state import State

LENIENT = 0.9  # the plan's figure: more than 90 % ACCURATE
# Ten grades before a flag: with fewer, one grade moves the rate by more than ten points,
# and "more than 90 %" of ten is all ten - an honest grader passing 70 % of steelmans does
# that with a chance of 0.7**10 ≈ 3 %, so a flag is rarely an accident.
MIN_GRADES = 10


def graders(debates: Iterable[State]) -> dict[str, dict[str, Any]]:
    """Per grader: grades given (PASS, i.e. ungraded, is none), how many ACCURATE, the rate,
    and whether it is flagged as lenient (with why)."""
    counts: dict[str, list[int]] = {}
    for d in debates:
        for s in d.steelmans:
            if s["grade"] in GRADES:
                c = counts.setdefault(str(s["target"]), [0, 0])
                c[0] += 1
                c[1] += s["grade"] == "ACCURATE"
    out = {}
    for who, (graded, accurate) in sorted(counts.items()):
        rate = accurate / graded
        flagged = graded >= MIN_GRADES and rate > LENIENT
        out[who] = {"graded": graded, "accurate": accurate, "rate": round(rate, 3),
                    "lenient": flagged,
                    "why": (f"graded {accurate} of {graded} steelmans ACCURATE "
                            f"({rate:.0%} > {LENIENT:.0%}): grade more critically")
                    if flagged else ""}
    return out
