"""Context files: a citizen's identity and memory in eight typed, capped files.

Each type has a token cap and a forget strategy (Experience v2 §Context System).
Whenever a context exceeds its cap at save time the 4-level fallback runs:
1. the strategy's own forgetting (compress, archive, keep the most recent n);
2. summarize the oldest 20% of entries into one;
3. truncate: drop the oldest entries;
4. emergency clear, keeping only the metadata.
Identity is never forgotten: over its cap it is kept and reported (a REFLECT wake
rewrites it). Saving writes only the files that changed, and a context that only grew
(a wake's history line) appends its new entries to a journal beside it (`history.jsonl`)
instead of rewriting the whole file: a few hundred bytes a wake, not the file's 170 KB.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citizen.home.tasks import now_iso
from shared.atomic import append_line, read_json, read_jsonl, write_bytes, write_json

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
# type → (strategy, argument)
STRATEGIES: dict[str, tuple[str, int]] = {
    "identity": ("never", 0),
    "history": ("compress_oldest", 0),
    "goals": ("archive_completed", 0),
    # The seed's "compress" (relationships) names no forgetting apart from compress_oldest
    # (history, skills), so it is the same one, under one name.
    "relationships": ("compress_oldest", 0),
    "skills": ("compress_oldest", 0),
    "dreams": ("keep_recent_n", 30),
    "working": ("clear_on_task_complete", 0),
    "peer_monitor": ("keep_recent_n", 15),
}
# Stable contexts first, so a provider can cache the prefix across wakes.
ORDER = ("identity", "skills", "relationships", "goals", "history", "dreams", "peer_monitor",
         "working")
_SUMMARY_SENTENCE = 160  # characters kept from each entry when summarizing
# Appends a journal takes before the next save rewrites its context whole (and drops it):
# a load reads at most this many lines beside the file.
JOURNAL_LINES = 64

TokenCounter = Callable[[str], int]


@dataclass
class Context:
    """One context file: a list of entries plus metadata."""

    type: str
    cap: int
    entries: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    # What is on disk (file and journal), copied apart from `entries` and `meta` (no
    # mutable object shared), so a save tells "unchanged" and "only grew" from the rest
    # by comparing them (equality: C speed, where encoding each entry again on every
    # load and save was most of a wake's CPU; 1 == 1.0 == True is the one change it
    # cannot see, and no writer swaps those). None: nothing on disk yet.
    saved: list[Any] = field(default_factory=list)
    saved_meta: dict[str, Any] | None = None
    journal: str = ""  # the file's journal token ("": a journal may not extend it)
    journal_lines: int = 0
    # The last render and the entries it was made from (each a shallow copy: a render
    # reads only an entry's text and status, plain values). A wake asks for each context's
    # text several times (the contexts event, the prompt's budget, the cap check at the
    # save); the copies' equality (C speed) tells an unchanged context from a changed one.
    _shown: tuple[list[dict[str, Any]], str] | None = field(default=None, repr=False,
                                                             compare=False)

    def add(self, text: str, **extra: Any) -> None:
        self.entries.append({"ts": now_iso(), "text": text, **extra})

    def render(self) -> str:
        if not self.entries:
            return ""
        shown = self._shown
        if shown is not None and shown[0] == self.entries:
            return shown[1]
        text = self.render_entries()
        self._shown = (list(map(dict, self.entries)), text)
        return text

    def render_entries(self) -> str:
        """The entries as the prompt shows them, rendered anew (`render` keeps the last)."""
        return f"## {self.type}\n" + "\n".join(self.line(e) for e in self.entries)

    @staticmethod
    def line(entry: dict[str, Any]) -> str:
        """One entry as the prompt shows it (a completed goal says so)."""
        done = " (completed)" if entry.get("status") == "completed" else ""
        return f"- {entry['text']}{done}"

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "type": self.type, "entries": self.entries,
                "meta": self.meta}


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _copy(value: Any) -> Any:
    """`value` as it reads back from disk, sharing no object with it."""
    return json.loads(_compact(value))


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _apart(entries: list[Any]) -> list[Any]:
    """`entries` sharing no mutable object with them: an entry of plain values (nearly
    all) is copied as a dict - a tenth of the cost of encoding it - any other by JSON.
    (The types' check is a set's, in C: a generator per entry was a third of a load.)"""
    plain = _SCALARS.issuperset
    return [dict(e) if type(e) is dict and plain(map(type, e.values())) else _copy(e)
            for e in entries]


def _first_sentence(text: str) -> str:
    head = text.strip().split("\n", 1)[0]
    for stop in (". ", "! ", "? "):
        if stop in head:
            head = head.split(stop, 1)[0] + stop.strip()
            break
    return head[:_SUMMARY_SENTENCE]


def summarize(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold entries into one extractive summary entry (no model: runs in `finally`)."""
    first, last = entries[0].get("ts", "?"), entries[-1].get("ts", "?")
    text = "; ".join(_first_sentence(e["text"]) for e in entries)
    return {"ts": last, "text": f"[summary of {len(entries)} entries {first} .. {last}] {text}",
            "summary": True}


class ContextStore:
    """Loads and saves the eight context files of one citizen."""

    def __init__(self, directory: Path, limits: Mapping[str, int],
                 count: TokenCounter) -> None:
        self.dir = directory
        self.limits = limits
        self.count = count

    def path(self, ctype: str) -> Path:
        return self.dir / f"{ctype}.json"

    def journal(self, ctype: str) -> Path:
        """Entries appended since the file was last written whole (`history.jsonl`)."""
        return self.dir / f"{ctype}.jsonl"

    def init(self, identity: str) -> None:
        """Create missing context files (identity from its template); never overwrites."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for ctype in ORDER:
            if not self.path(ctype).exists():
                ctx = Context(ctype, self.limits[ctype], meta={"created": now_iso()})
                if ctype == "identity":
                    ctx.add(identity)
                write_json(self.path(ctype), ctx.to_dict())

    def load(self, ctype: str) -> Context:
        """One context; a missing file is an empty context.

        :raises CorruptFile: the file does not parse (it is kept, the wake fails).
        """
        path = self.path(ctype)
        if not path.exists():
            return Context(ctype, self.limits[ctype], meta={"created": now_iso()})
        data = read_json(path, SCHEMA_VERSION)
        ctx = Context(ctype, self.limits[ctype], list(data.get("entries", [])),
                      dict(data.get("meta", {})), journal=str(data.get("journal", "")))
        journal = self.journal(ctype)
        if ctx.journal and journal.exists():
            # Only lines written against this very file: after a rewrite (a new token) the
            # old journal's lines are already in it, and a crash before the journal was
            # removed must not add them twice. A torn last line (killed mid-append) is skipped.
            lines = read_jsonl(journal)
            ctx.journal_lines = len(lines)
            for line in lines:
                if isinstance(line, dict) and line.get("base") == ctx.journal:
                    ctx.entries.extend(line.get("entries", []))
        ctx.saved, ctx.saved_meta = _apart(ctx.entries), _copy(ctx.meta)
        return ctx

    def load_all(self) -> dict[str, Context]:
        return {ctype: self.load(ctype) for ctype in ORDER}

    def tokens(self, ctx: Context) -> int:
        return self.count(ctx.render())

    def forget(self, ctx: Context) -> list[str]:
        """Bring a context under its cap; returns the levels applied (for the wake log)."""
        applied: list[str] = []
        if self.tokens(ctx) <= ctx.cap:
            return applied
        strategy, arg = STRATEGIES[ctx.type]
        if strategy == "never":
            log.warning("identity is over its cap (%d tokens); kept whole", self.tokens(ctx))
            return ["never: over cap, kept"]
        self._strategy(ctx, strategy, arg)
        applied.append(f"1:{strategy}")
        if self.tokens(ctx) > ctx.cap and len(ctx.entries) > 1:
            cut = max(1, len(ctx.entries) // 5)
            ctx.entries[:cut] = [summarize(ctx.entries[:cut])]
            applied.append("2:summarize_oldest_20pct")
        if self.tokens(ctx) > ctx.cap:
            while len(ctx.entries) > 1 and self.tokens(ctx) > ctx.cap:
                ctx.entries.pop(0)
            if self.tokens(ctx) > ctx.cap and ctx.entries:
                keep_chars = int(len(ctx.entries[0]["text"]) * ctx.cap / self.tokens(ctx))
                ctx.entries[0]["text"] = ctx.entries[0]["text"][-max(0, keep_chars - 20):]
            applied.append("3:truncate_oldest")
        if self.tokens(ctx) > ctx.cap:
            ctx.entries = []
            applied.append("4:emergency_clear")
        ctx.meta.setdefault("forgotten", []).append({"ts": now_iso(), "levels": applied})
        ctx.meta["forgotten"] = ctx.meta["forgotten"][-20:]
        return applied

    def _strategy(self, ctx: Context, strategy: str, arg: int) -> None:
        if strategy == "keep_recent_n":
            ctx.entries = ctx.entries[-arg:]
        elif strategy == "compress_oldest":
            half = len(ctx.entries) // 2
            if half >= 2:
                ctx.entries[:half] = [summarize(ctx.entries[:half])]
        elif strategy == "archive_completed":
            done = [e for e in ctx.entries if e.get("status") == "completed"]
            for entry in done:
                append_line(self.dir / "archive" / f"{ctx.type}.jsonl", entry)
            ctx.entries = [e for e in ctx.entries if e.get("status") != "completed"]
        # clear_on_task_complete: nothing here; the task's end clears it.

    def save_all(self, contexts: Mapping[str, Context]) -> dict[str, list[str]]:
        """Forget what exceeds caps, then save each context that changed: one that only
        grew appends its new entries to its journal; any other change rewrites it whole."""
        forgotten: dict[str, list[str]] = {}
        for ctype, ctx in contexts.items():
            levels = self.forget(ctx)
            if levels:
                forgotten[ctype] = levels
            known = len(ctx.saved)
            grew = (ctx.meta == ctx.saved_meta and len(ctx.entries) >= known
                    and ctx.entries[:known] == ctx.saved)
            if grew and len(ctx.entries) == known:
                continue  # unchanged: the file keeps its bytes, inode and mtime
            if grew and ctx.journal and ctx.journal_lines < JOURNAL_LINES:
                new = ctx.entries[known:]
                copied = _apart(new)  # first: an entry JSON cannot hold fails before a write
                self._append(ctx, new)
                ctx.saved.extend(copied)
            else:
                self._rewrite(ctx)
                ctx.saved, ctx.saved_meta = _apart(ctx.entries), _copy(ctx.meta)
        return forgotten

    def _append(self, ctx: Context, new: list[dict[str, Any]]) -> None:
        """`new` entries as one line of the journal, durable before the save returns."""
        path = self.journal(ctx.type)
        fresh = not path.exists()
        append_line(path, {"base": ctx.journal, "entries": new})
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # as durable as a rewrite would have been
        finally:
            os.close(fd)
        if fresh:  # the new name is durable only once the directory entry is on disk
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        ctx.journal_lines += 1

    def _rewrite(self, ctx: Context) -> None:
        """The whole context under a new journal token, then its old journal removed: a
        crash in between leaves lines of the old token, which no load applies."""
        ctx.journal = os.urandom(6).hex()
        write_bytes(self.path(ctx.type), _compact({**ctx.to_dict(),
                                                   "journal": ctx.journal}).encode())
        self.journal(ctx.type).unlink(missing_ok=True)
        ctx.journal_lines = 0

    def emergency_dump(self, contexts: Mapping[str, Context], error: str) -> Path:
        """Write everything as it is into one file beside the contexts, for recovery."""
        stamp = now_iso().replace(":", "")
        path = self.dir / "emergency" / f"{stamp}.json"
        write_json(path, {"error": error,
                          "contexts": {k: c.to_dict() for k, c in contexts.items()}})
        return path
