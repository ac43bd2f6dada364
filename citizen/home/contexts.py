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
What a prompt shows of each context is kept between wakes keyed by its bytes
(citizen.home.rendered), so a load parses only what has no view for its bytes, and a
wake parses the rest only if it reads or replaces their entries (issue 45).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from citizen.home import rendered
from citizen.home.context import SCHEMA_VERSION, Context, TokenCounter
from citizen.home.tasks import now_iso
from shared import door
from shared.atomic import (
    MAX_HISTORY,
    CorruptFile,
    TooBig,
    append_line,
    parse_json,
    parse_jsonl,
    read_tail,
    write_bytes,
    write_json,
)

log = logging.getLogger(__name__)
__all__ = ["ORDER", "SCHEMA_VERSION", "STRATEGIES", "Context", "ContextStore"]

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


def _fill(ctx: Context, data: dict[str, Any]) -> None:
    """A parsed file's entries (then its journal's) and meta into `ctx`, and `saved`."""
    ctx._entries = [*data.get("entries", []), *ctx.tail]
    ctx._meta = dict(data.get("meta", {}))
    ctx.saved, ctx.saved_meta = _apart(ctx._entries), _copy(ctx._meta)


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
                 count: TokenCounter, *, keep_views: bool = False) -> None:
        """`keep_views`: the wake's store keeps what its prompt shows of each context for
        the next wake (citizen.home.rendered, by its provider's counter). Any other
        reader - the CLI, a tool run by hand, a peer - uses a view it finds and writes
        none: a read leaves the home as it was, and another counter's view would
        displace the wake's."""
        self.dir = directory
        self.limits = limits
        self.count = count
        self.counter = rendered.counter_id(count)
        self.keep_views = keep_views

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
        """One context; a missing file is an empty context. The file's bytes are read
        and keyed: with a view kept for that key the file is parsed only when its entries
        are needed, else it is parsed now (and its view kept for the next wake). The
        journal's entries for this file (a few) are read either way.

        :raises CorruptFile: the file does not parse (it is kept, the wake fails). Bytes
            with a kept view were parsed before, so a load finds every corrupt file.
        """
        path = self.path(ctype)
        if not path.exists():
            return Context(ctype, self.limits[ctype], meta={"created": now_iso()})
        try:
            base = door.read_capped(path)
        except TooBig as exc:
            raise CorruptFile(path, str(exc)) from exc
        key = rendered.key_of(base, self.counter)
        view = rendered.read(self.dir, ctype, key)

        def parse(ctx: Context) -> None:
            _fill(ctx, parse_json(path, base, SCHEMA_VERSION))

        ctx = Context(ctype, self.limits[ctype], parse=parse, view=view)
        data = None
        if view is None:
            data = parse_json(path, base, SCHEMA_VERSION)  # a corrupt file fails the load
            ctx.journal = str(data.get("journal", ""))
            if self.keep_views:
                ctx.view = self._viewed(ctx, key, data.get("entries", []))
        else:
            ctx.journal = view.journal
        if ctx.journal:
            # Only lines written against this very file: after a rewrite (a new token) the
            # old journal's lines are already in it, and a crash before the journal was
            # removed must not add them twice. A torn last line (killed mid-append) is skipped.
            try:
                lines = parse_jsonl(read_tail(self.journal(ctype), MAX_HISTORY))
            except FileNotFoundError:
                lines = []
            ctx.journal_lines = len(lines)
            ctx.tail = [e for line in lines if isinstance(line, dict)
                        and line.get("base") == ctx.journal for e in line.get("entries", [])]
        if data is not None:  # parsed already: no second parse, and no second render
            text = ctx.render() if ctx.view is not None else ""
            ctx.parse_with(lambda c: _fill(c, data))
            if text:
                ctx.rendered_as(text)
        return ctx

    def _viewed(self, ctx: Context, key: str, entries: list[Any]) -> rendered.View:
        """The view of the file's `entries`, kept for the next load of the same bytes."""
        view = rendered.made(key, f"## {ctx.type}\n", [ctx.line(e) for e in entries],
                             [i for i, e in enumerate(entries) if e.get("pinned")],
                             self.count, journal=ctx.journal)
        rendered.write(self.dir, ctx.type, view)
        return view

    def load_all(self) -> dict[str, Context]:
        return {ctype: self.load(ctype) for ctype in ORDER}

    def tokens(self, ctx: Context) -> int:
        return ctx.tokens(self.count)

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
        grew appends its new entries to its journal; any other change rewrites it whole.
        A context never parsed that only grew (and stays under its cap) is appended to
        without being parsed."""
        forgotten: dict[str, list[str]] = {}
        for ctype, ctx in contexts.items():
            if not ctx.parsed:
                if not ctx.pending or self._grown(ctx):
                    continue  # unchanged, or its new entries appended to the journal
                ctx.entries  # noqa: B018 - over its cap, or no journal: parsed, as any
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

    def _grown(self, ctx: Context) -> bool:
        """Append an unparsed context's new entries to its journal if it stays under its
        cap and its journal may take them (the file and its view stay); False: parse it."""
        if (ctx.view is None or not ctx.journal or ctx.journal_lines >= JOURNAL_LINES
                or self.count(ctx.render()) > ctx.cap):
            return False
        new = ctx.pending
        _apart(new)  # an entry JSON cannot hold fails before a write, as for a parsed one
        self._append(ctx, new)
        ctx.tail, ctx.pending = [*ctx.tail, *new], []
        return True

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
        raw = _compact({**ctx.to_dict(), "journal": ctx.journal}).encode()
        write_bytes(self.path(ctx.type), raw)
        self.journal(ctx.type).unlink(missing_ok=True)
        ctx.view = None
        if self.keep_views:
            ctx.view = self._viewed(ctx, rendered.key_of(raw, self.counter), ctx.entries)
            if ctx.view.text:
                ctx.rendered_as(ctx.view.text)
        ctx.journal_lines = 0

    def emergency_dump(self, contexts: Mapping[str, Context], error: str) -> Path:
        """Write everything as it is into one file beside the contexts, for recovery."""
        stamp = now_iso().replace(":", "")
        path = self.dir / "emergency" / f"{stamp}.json"
        write_json(path, {"error": error,
                          "contexts": {k: c.to_dict() for k, c in contexts.items()}})
        return path
