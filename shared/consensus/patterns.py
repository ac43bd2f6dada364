"""Learned patterns: `shared/memory/patterns.jsonl`, the collective's lessons that recur.

The seed's integrator, at the end of an episode: "I'm recording this as a pattern in
memory/patterns.jsonl: 'Before writing files, check existence …'. Future proposals can
reference this pattern." So the integrator writes them at a proposal's record step (the
`patterns` its episode names), and the executor's and verifier's prompts read the most
relevant few ("what patterns has the collective learned?", "does this align with past
successful patterns?").

The file is appended by every integrator (group `citizens`), so a line alone proves
nothing: it counts only if `vouch` confirms it (the commons checks that the episode's
record - its integrator's own file - names exactly this pattern). Malformed lines are
skipped. On several servers (`remote`) each line is a record of its own
(`shared.consensus.journal`: appended without a lock, its author the broker's word).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from shared import clock
from shared.atomic import append_line, make_dirs
from shared.consensus.episodes import lines as history_lines
from shared.consensus.episodes import relevant
from shared.consensus.journal import Journal, folder_of
from shared.layout import Layout
from shared.remote import Remote, key

MODE = 0o664  # appended by every integrator (group `citizens`), read by all
PER_EPISODE = 2  # patterns one episode may record (the schema's maxItems)
MAX_CHARS = 300
SHOWN = 3  # patterns a prompt shows
READ_LAST = 500  # the newest lines considered (each vouch reads one record)
# Bytes read from the file's end: READ_LAST lines of at most ~1 KB (MAX_CHARS and ids).
# Any citizen appends to it, so never more: a planted sparse giant fills no reader.
TAIL = READ_LAST * 2048

Vouch = Callable[[Mapping[str, Any]], bool]


class Patterns:
    def __init__(self, shared_dir: Path, vouch: Vouch | None = None,
                 remote: Remote | None = None) -> None:
        self.path = Layout(shared_dir).patterns
        self.vouch = vouch
        self.journal = None if remote is None else Journal(
            remote, folder_of(key(shared_dir, self.path)))

    def all(self) -> list[dict[str, Any]]:
        """The well-formed, vouched-for lines among the newest READ_LAST."""
        found = self.journal.lines() if self.journal is not None \
            else history_lines(self.path, TAIL)
        lines = [line for line in found[-READ_LAST:]
                 if isinstance(line.get("pattern"), str) and isinstance(line.get("episode"), str)]
        return [line for line in lines if self.vouch is None or self.vouch(line)]

    def add(self, patterns: list[str], *, episode: str, proposal: str,
            by: str) -> list[dict[str, Any]]:
        """Append an episode's patterns (already cut to PER_EPISODE and MAX_CHARS)."""
        lines = [{"ts": clock.now(), "pattern": p, "episode": episode, "proposal": proposal,
                  "recorded_by": by} for p in patterns]
        if lines and self.journal is not None:
            for line in lines:
                self.journal.add(line)
        elif lines:
            make_dirs(self.path.parent)
            for line in lines:
                append_line(self.path, line, mode=MODE)
        return lines

    def relevant(self, text: str, limit: int = SHOWN) -> list[dict[str, Any]]:
        """What a prompt sees: the patterns most relevant to `text`, else the newest."""
        return [{"pattern": p["pattern"], "episode": p["episode"]} for p in
                relevant(self.all(), text, lambda p: str(p["pattern"]), limit)]


def cleaned(raw: Any) -> list[str]:
    """The patterns an integrator's notes name, as its episode records them."""
    items = raw if isinstance(raw, list) else []
    return [str(p).strip()[:MAX_CHARS] for p in items if str(p).strip()][:PER_EPISODE]
