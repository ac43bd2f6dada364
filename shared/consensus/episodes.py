"""Collective episodic memory: `shared/memory/episodes.jsonl` and `consensus_history.jsonl`.

Each finished proposal leaves one episode (goal, outcome, rounds, conflicts, key
learnings, values served, weight adjustments). The seed's compaction keeps the
last KEEP episodes in full; older ones move to `episodes_archive.jsonl` and their
learnings are summarised (extractively - no model) into `episodes_summary.md`.
Relevant episodes for a prompt are found with SQLite FTS5 over the kept ones.

On several servers (`remote`) each episode and each decision is a record of its own
(`shared.consensus.journal`): nothing is compacted (the database deletes nothing), the
newest KEEP are the kept ones and the older the archive; no summary file is written.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.atomic import append_line, make_dirs, read_jsonl, write_bytes
from shared.consensus.journal import Journal, folder_of
from shared.layout import Layout
from shared.locks import locked
from shared.remote import Remote, key

log = logging.getLogger(__name__)

KEEP = 100  # episodes kept in full (the seed's sliding window)
# The newest 8 MiB of a memory file: COMPACT_AT episodes of a few KB fit many times over.
# Every citizen appends to these files (0664), so none is read past a cap: a sparse
# terabyte planted there must not fill every reader's memory (root's included).
TAIL = 8 * 2**20
# The archive and the decisions' history only grow: their newest 64 MiB.
LONG_TAIL = 64 * 2**20
COMPACT_AT = 200  # compact once this many have accumulated
SHOWN = 5  # episodes in each agent's prompt: the seed's "5 recent episodes" (its L853-858)
MODE = 0o664  # appended by every integrator (group `citizens`), read by all


class Episodes:
    def __init__(self, shared_dir: Path, remote: Remote | None = None) -> None:
        self.dir = Layout(shared_dir).memory
        self.path = Layout(shared_dir).episodes
        self.history_path = self.dir / "consensus_history.jsonl"
        self.archive = self.dir / "episodes_archive.jsonl"
        self.summary = self.dir / "episodes_summary.md"
        # Several servers: a record each (append-only; no lock, no compaction).
        self.journal: Journal | None = None
        self.decisions: Journal | None = None
        if remote is not None:
            self.journal = Journal(remote, folder_of(key(shared_dir, self.path)))
            self.decisions = Journal(remote, folder_of(key(shared_dir, self.history_path)))

    def all(self) -> list[dict[str, Any]]:
        if self.journal is not None:
            return self.journal.lines()[-KEEP:]
        return lines(self.path, TAIL)

    def history(self) -> list[dict[str, Any]]:
        if self.decisions is not None:
            return self.decisions.lines()
        return lines(self.history_path, LONG_TAIL)

    def add(self, episode: dict[str, Any]) -> None:
        if self.journal is not None:  # no lock: a new key each, and nothing compacts
            self.journal.add(episode)
            return
        make_dirs(self.dir)
        # One lock for appends and compaction: compaction rewrites episodes.jsonl.
        with locked(self.path):
            append_line(self.path, episode, mode=MODE)
            if len(self.all()) > COMPACT_AT:
                self._compact()

    def decision(self, line: dict[str, Any]) -> None:
        """Append one consensus decision to the history."""
        if self.decisions is not None:
            self.decisions.add(line)
            return
        make_dirs(self.dir)
        append_line(self.history_path, line, mode=MODE)

    def _compact(self) -> None:
        episodes = self.all()
        old, keep = episodes[:-KEEP], episodes[-KEEP:]
        for ep in old:
            append_line(self.archive, ep, mode=MODE)
        learnings = Counter(str(x) for ep in self.archive_all() for x in
                            ep.get("key_learnings", []))
        outcomes = Counter(str(ep.get("outcome")) for ep in self.archive_all())
        lines = ["# Older episodes, summarised", "",
                 "Outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()), "",
                 "Most repeated learnings:", ""]
        lines += [f"- ({n}×) {text}" for text, n in learnings.most_common(30)]
        write_bytes(self.summary, ("\n".join(lines) + "\n").encode(), mode=MODE)
        body = "".join(_line(ep) for ep in keep).encode()
        write_bytes(self.path, body, mode=MODE)

    def archive_all(self) -> list[dict[str, Any]]:
        if self.journal is not None:
            return self.journal.lines()[:-KEEP]
        return lines(self.archive, LONG_TAIL)

    def stamp(self) -> tuple[int, ...]:
        """Changes whenever an episode is added (a weight's vouch reads them)."""
        if self.journal is not None:
            return self.journal.stamp()
        try:
            st = self.path.lstat()
        except FileNotFoundError:
            return (0, 0)
        return (st.st_mtime_ns, st.st_size)

    def relevant(self, text: str, limit: int = SHOWN) -> list[dict[str, Any]]:
        """The kept episodes most relevant to `text` (FTS5 rank), else the most recent."""
        return relevant(self.all(), text, _searchable, limit)

    def ids(self) -> set[str]:
        """The id of every episode there is (kept and archived)."""
        if self.journal is not None:  # one listing, not two
            return {str(ep.get("id")) for ep in self.journal.lines()}
        return {str(ep.get("id")) for ep in [*self.archive_all(), *self.all()]}


def lines(path: Path, tail: int) -> list[dict[str, Any]]:
    """The JSON objects among the newest `tail` bytes of a history every citizen appends
    to (a line too deep, torn or not an object is skipped); [] when it is absent or
    cannot be read as a plain file (a link, a FIFO: logged) - a broken history is named,
    never a step or a decision stopped."""
    try:
        found = read_jsonl(path, tail_bytes=tail)
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("%s is not read (%s) - move it aside", path, exc)
        return []
    return [line for line in found if isinstance(line, dict)]


def relevant(items: list[dict[str, Any]], text: str, searchable: Callable[[dict[str, Any]], str],
             limit: int = 3) -> list[dict[str, Any]]:
    """The `items` most relevant to `text` (SQLite FTS5 rank over `searchable(item)`), else
    the most recent (the last `limit`): one ranking for episodes, patterns and precedents."""
    words = re.findall(r"[A-Za-z0-9]{2,}", text.lower())[:30]
    if not items:
        return []
    if not words:
        return items[-limit:]
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE e USING fts5(body)")
    db.executemany("INSERT INTO e(rowid, body) VALUES (?, ?)",
                   [(i, searchable(item)) for i, item in enumerate(items)])
    query = " OR ".join(f'"{w}"' for w in dict.fromkeys(words))
    rows = db.execute("SELECT rowid FROM e WHERE e MATCH ? ORDER BY rank LIMIT ?",
                      (query, limit)).fetchall()
    db.close()
    found = [items[r[0]] for r in rows]
    return found or items[-limit:]


def _line(ep: dict[str, Any]) -> str:
    return json.dumps(ep, ensure_ascii=False, separators=(",", ":")) + "\n"


def _searchable(ep: dict[str, Any]) -> str:
    parts = [str(ep.get("goal", "")), str(ep.get("outcome", "")),
             " ".join(str(x) for x in ep.get("key_learnings", []))]
    return " ".join(parts)


def brief(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a prompt sees of an episode: id, goal, outcome, learnings."""
    return [{"id": ep.get("id"), "goal": str(ep.get("goal", ""))[:200],
             "outcome": ep.get("outcome"),
             "key_learnings": [str(x)[:200] for x in ep.get("key_learnings", [])][:3]}
            for ep in episodes]
