"""Hierarchical memory: raw entries per wake, rolled up into daily, weekly, monthly summaries.

Raw entries are append-only JSONL per day. Roll-ups are written by the model in a
scheduled job; `pending()` is the deterministic gate, so an idle civilization
makes no roll-up calls. Everything is indexed in SQLite FTS5 (stdlib) for search.

The files are the memory; the index is a cache of them, rebuilt whenever it cannot be
trusted. So it is written without a journal on disk and without fsync (a wake writes
its pages only, no fdatasync): a writer marks the index's lock file (`1`, under the
one lock) before it touches a memory file and unmarks it (`0`) once the index has
them too - one byte of a file that stays, no file made and removed each time; a
mark left by a writer killed in between (kill -9 mid-commit, or between the raw line
and its index row) makes the next opener rebuild the index from the files. A power
loss that tears the index shows as a database error, which rebuilds it as well.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Any

from shared import clock
from shared.atomic import append_line, write_bytes
from shared.locks import lock_path, locked

LEVELS = ("daily", "weekly", "monthly")
Summarizer = Callable[[str, str, str], str]  # (level, key, source text) -> summary


def _week_key(day: date) -> str:
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


class Memory:
    """One citizen's memory directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.index_path = directory / "index.sqlite"

    def init(self) -> None:
        for sub in ("raw", *LEVELS):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)

    def _db(self) -> sqlite3.Connection:
        """The index, rebuilt first when a writer died mid-way or it does not open."""
        # Only the memory's owner rebuilds: root or a peer reading it (`citizen memory
        # search`) must not leave files in it that its owner cannot write.
        owner = self.dir.stat().st_uid == os.geteuid()
        if owner and self._marked():
            with self._writing():  # rebuilds under the lock (the mark's writer is gone)
                pass
        try:
            return self._open()
        except sqlite3.DatabaseError:  # torn by a power loss: the files still hold it all
            if not owner:
                raise
            with self._writing(rebuild=True):
                pass
            return self._open()

    def _marked(self) -> bool:
        try:
            with lock_path(self.index_path).open("rb") as fh:
                return fh.read(1) == b"1"
        except FileNotFoundError:
            return False

    def _mark(self, value: bytes) -> None:
        fd = os.open(lock_path(self.index_path), os.O_WRONLY | os.O_NOFOLLOW)
        try:
            os.pwrite(fd, value, 0)
        finally:
            os.close(fd)

    def _open(self) -> sqlite3.Connection:
        fresh = not self.index_path.exists()
        db = sqlite3.connect(self.index_path, timeout=30)
        # A cache of the files (module docstring): no journal file, no fsync; a torn
        # index is noticed by the mark or by SQLite and rebuilt, never trusted.
        db.execute("PRAGMA journal_mode=MEMORY")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS memory USING fts5(kind, ref, day, text)")
        if fresh:
            self._reindex(db)
        return db

    @contextmanager
    def _writing(self, rebuild: bool = False) -> Iterator[None]:
        """Change the memory files and the index as one step: the mark is set before and
        removed after, under the one lock (one writer at a time, so a mark found by the
        lock's holder is a dead writer's). A body that raises leaves the mark: the next
        opener rebuilds."""
        # The one lock, beside the index in the citizen's own memory directory: only the
        # citizen's processes write its memory.
        with locked(self.index_path, mode=0o600):  # 0600: a lock a peer can open, it can hold
            stale = rebuild or self._marked()
            self._mark(b"1")  # first: a rebuild killed half-way is redone too
            if stale:
                self.index_path.unlink(missing_ok=True)
                self._open().close()  # rebuilt from the files, before anything new is added
            yield
            self._mark(b"0")

    def _insert(self, kind: str, ref: str, day: str, text: str) -> None:
        db = self._open()
        try:
            with db:
                db.execute("INSERT INTO memory VALUES (?, ?, ?, ?)", (kind, ref, day, text))
        finally:
            db.close()

    def _reindex(self, db: sqlite3.Connection) -> None:
        for path in sorted((self.dir / "raw").glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line after a crash; the rest still counts
                db.execute("INSERT INTO memory VALUES ('raw', ?, ?, ?)",
                           (str(entry.get("wake", "")), path.stem, entry.get("text", "")))
        for level in LEVELS:
            for path in sorted((self.dir / level).glob("*.md")):
                db.execute("INSERT INTO memory VALUES (?, ?, ?, ?)",
                           (level, path.stem, path.stem, path.read_text(encoding="utf-8")))
        db.commit()

    def record(self, wake: int, wake_type: str, text: str, when: datetime | None = None) -> None:
        """Append one raw memory entry and index it."""
        when = when or clock.moment()
        day = when.date().isoformat()
        entry = {"ts": when.isoformat(timespec="seconds"), "wake": wake, "type": wake_type,
                 "text": text}
        with self._writing():
            append_line(self.dir / "raw" / f"{day}.jsonl", entry)
            self._insert("raw", str(wake), day, text)

    def latest_wake(self, kinds: tuple[str, ...] = ()) -> int:
        """The wake number of the newest raw entry, of one of `kinds` if given (0: none)."""
        files = sorted((self.dir / "raw").glob("*.jsonl"))
        for path in reversed(files):
            for line in reversed(path.read_text(encoding="utf-8").splitlines()):
                try:
                    entry = json.loads(line)
                    if not kinds or entry.get("type") in kinds:
                        return int(entry.get("wake", 0))
                except (json.JSONDecodeError, ValueError, AttributeError):
                    continue
        return 0

    def search(self, query: str, limit: int = 8) -> list[dict[str, Any]]:
        """Full-text search over every level; the query is treated as plain words."""
        words = re.findall(r"\w+", query)
        if not words:
            return []
        match = " OR ".join(f'"{w}"' for w in words)  # quoted: user text is never FTS syntax
        with self._db() as db:
            rows = db.execute(
                "SELECT kind, ref, day, snippet(memory, 3, '[', ']', '…', 24) FROM memory "
                "WHERE memory MATCH ? ORDER BY rank LIMIT ?", (match, limit)).fetchall()
        return [{"kind": k, "ref": r, "day": d, "snippet": s} for k, r, d, s in rows]

    def pending(self, today: date | None = None) -> list[tuple[str, str, list[Path]]]:
        """Roll-ups that are due: (level, key, source files). Empty when idle."""
        today = today or clock.today()
        due: list[tuple[str, str, list[Path]]] = []
        for path in sorted((self.dir / "raw").glob("*.jsonl")):
            if date.fromisoformat(path.stem) < today and not (
                    self.dir / "daily" / f"{path.stem}.md").exists():
                due.append(("daily", path.stem, [path]))
        this_week = _week_key(today)
        weeks: dict[str, list[Path]] = {}
        for path in sorted((self.dir / "daily").glob("*.md")):
            weeks.setdefault(_week_key(date.fromisoformat(path.stem)), []).append(path)
        for key, sources in weeks.items():
            if key < this_week and not (self.dir / "weekly" / f"{key}.md").exists():
                due.append(("weekly", key, sources))
        months: dict[str, list[Path]] = {}
        for path in sorted((self.dir / "weekly").glob("*.md")):
            monday = datetime.strptime(path.stem + "-1", "%G-W%V-%u").date()
            months.setdefault(monday.strftime("%Y-%m"), []).append(path)
        for key, sources in months.items():
            if key < today.strftime("%Y-%m") and not (
                    self.dir / "monthly" / f"{key}.md").exists():
                due.append(("monthly", key, sources))
        return due

    def rollup(self, summarize: Summarizer, today: date | None = None) -> list[str]:
        """Write every due roll-up with `summarize`; returns the files written."""
        written = []
        # Daily before weekly before monthly: a new daily can complete a week.
        for level in LEVELS:
            for lvl, key, sources in self.pending(today):
                if lvl != level:
                    continue
                text = "\n\n".join(p.read_text(encoding="utf-8") for p in sources)
                summary = summarize(level, key, text[-60_000:])
                out = self.dir / level / f"{key}.md"
                with self._writing():
                    write_bytes(out, summary.encode())
                    self._insert(level, key, key, summary)
                written.append(str(out))
        return written
