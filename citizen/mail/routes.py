"""One table from mail subjects to task kinds. Later features add their rows here.

The first matching row wins; a subject that matches none is a plain TASK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    pattern: re.Pattern[str]
    kind: str


ROUTES: list[Route] = [
    # Anywhere in the subject: replies ("Re: [consensus] approval needed: …") route too.
    Route(re.compile(r"\[consensus\]", re.IGNORECASE), "CONSENSUS"),
    Route(re.compile(r"^\s*\[debate\]", re.IGNORECASE), "DEBATE"),
    Route(re.compile(r"^\s*\[code\]", re.IGNORECASE), "CODE"),
    Route(re.compile(r"^\s*\[debug\]", re.IGNORECASE), "DEBUG"),
    Route(re.compile(r"^\s*\[research\]", re.IGNORECASE), "RESEARCH"),
]


def register(pattern: str, kind: str) -> None:
    """Add a row (e.g. `[debate]` → DEBATE) ahead of the generic ones."""
    ROUTES.insert(0, Route(re.compile(pattern, re.IGNORECASE), kind))


def kind_for(subject: str) -> str:
    """The task kind a subject asks for."""
    for route in ROUTES:
        if route.pattern.search(subject):
            return route.kind
    return "TASK"
