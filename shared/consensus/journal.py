"""An append-only history of the Thought World kept by the civilization (several servers).

On one server the episodes, the consensus decisions, the learned patterns and the
weight history are JSON-lines files every integrator appends to. On several servers
(`shared.remote`) each line is a record of its own, created once under the history's
folder - `memory/episodes/`, `memory/consensus_history/`, `memory/patterns/`,
`values/weight_history/` (the file's key without `.jsonl`) - so:
- no lock: appending is creating a key nobody else can take (the writer's world time
  to the microsecond, then a random part), not a read-modify-write of one file;
- a line's author is the broker's word (the kernel's), where a file's line had none;
- a line is never rewritten, so no reader trusts a later edit.

Lines come back oldest key first: time-sortable by the writer's clock (servers' clocks
agree to NTP's precision; two lines within that may swap - the replays that read them
are rules over the set, not over microseconds). A history is listed whole, page after
page of the broker's (`citizen.access.commons.pages`): each read costs a call per 2,000
lines - a listing from the newest back, for the readers that want only the last few,
is not built yet.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from shared import clock
from shared.remote import Remote

log = logging.getLogger(__name__)

LINE = "line"  # a record's data is {"line": …}: the broker adds its own "author" beside it


class Journal:
    """One history as records under `folder` (a key relative to the commons' root)."""

    def __init__(self, remote: Remote, folder: str) -> None:
        self.remote = remote
        self.folder = folder

    def add(self, line: dict[str, Any]) -> dict[str, Any]:
        """Append `line` (as its own record, created once); returns it."""
        name = f"{clock.moment():%Y%m%dT%H%M%S%f}-{secrets.token_hex(4)}"
        self.remote.create(f"{self.folder}/{name}", {LINE: line})
        return line

    def lines(self) -> list[dict[str, Any]]:
        """Every line, oldest first (a record of another shape is skipped, logged)."""
        out = []
        for rec in self.remote.records(self.folder):
            line = rec.get("data", {}).get(LINE)
            if isinstance(line, dict):
                out.append(line)
            else:
                log.warning("ignoring %s: not a line of %s", rec.get("key"), self.folder)
        return out

    def stamp(self) -> tuple[int, ...]:
        """Changes whenever a line is added."""
        return self.remote.stamp(self.folder)


def folder_of(key: str) -> str:
    """A history file's key -> its lines' folder ('memory/episodes.jsonl' -> 'memory/
    episodes')."""
    return key.removesuffix(".jsonl")


__all__ = ["Journal", "folder_of"]
