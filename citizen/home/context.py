"""One context: a citizen's typed, capped list of entries (the file is
citizen.home.contexts's), and what a prompt shows of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from citizen.home import rendered
from citizen.home.tasks import now_iso

SCHEMA_VERSION = 1
TokenCounter = Callable[[str], int]


class Context:
    """One context file: a list of entries plus metadata.

    Loaded with a view that matches its file's bytes (citizen.home.rendered), a context
    is parsed only when something reads or replaces its entries or meta; until then its
    text, tokens and lines are the view's and then its journal's entries' (`tail`, a
    few), and what `add` appends waits in `pending` (appended to the journal without
    the file ever being parsed, if it stays under its cap)."""

    def __init__(self, type: str, cap: int, entries: list[dict[str, Any]] | None = None,
                 meta: dict[str, Any] | None = None, *, journal: str = "",
                 parse: Callable[[Context], None] | None = None,
                 view: rendered.View | None = None) -> None:
        self.type, self.cap = type, cap
        self._entries: list[dict[str, Any]] = list(entries or [])
        self._meta: dict[str, Any] = dict(meta or {})
        # What is on disk (file and journal), copied apart from `entries` and `meta` (no
        # mutable object shared), so a save tells "unchanged" and "only grew" from the
        # rest by comparing them (equality: C speed, where encoding each entry again on
        # every load and save was most of a wake's CPU; 1 == 1.0 == True is the one
        # change it cannot see, and no writer swaps those). None: nothing on disk yet.
        self.saved: list[Any] = []
        self.saved_meta: dict[str, Any] | None = None
        self.journal = journal  # the file's journal token ("": a journal may not extend it)
        self.journal_lines = 0
        self._parse = parse  # set while the bytes on disk are not parsed yet
        self.view = view  # what the prompt shows of the bytes on disk, while it holds
        self.tail: list[dict[str, Any]] = []  # the journal's entries, while not parsed
        self.pending: list[dict[str, Any]] = []  # added while not parsed
        # The last render and the entries it was made from (each a shallow copy: a
        # render reads only an entry's text and status, plain values). A wake asks for
        # each context's text several times (the contexts event, the prompt's budget,
        # the cap check at the save); the copies' equality tells a changed one.
        self._shown: tuple[list[dict[str, Any]], str] | None = None

    @property
    def parsed(self) -> bool:
        return self._parse is None

    def parse_with(self, parse: Callable[[Context], None]) -> None:
        """Parse now, with `parse` (the loader's, with the bytes it has already parsed)."""
        self._parse = parse
        self._ensure()

    def _ensure(self) -> None:
        if self._parse is not None:
            parse, self._parse = self._parse, None
            parse(self)  # the file's entries and the tail's, `saved` as on disk
            self._entries.extend(self.pending)
            self.tail, self.pending = [], []

    @property
    def entries(self) -> list[dict[str, Any]]:
        self._ensure()
        return self._entries

    @entries.setter
    def entries(self, value: list[dict[str, Any]]) -> None:
        self._ensure()  # what was on disk: a save compares against it
        self._entries = value

    @property
    def meta(self) -> dict[str, Any]:
        self._ensure()
        return self._meta

    @meta.setter
    def meta(self, value: dict[str, Any]) -> None:
        self._ensure()
        self._meta = value

    def add(self, text: str, **extra: Any) -> None:
        entry = {"ts": now_iso(), "text": text, **extra}
        (self.pending if self._parse is not None else self._entries).append(entry)

    def _extra(self) -> list[dict[str, Any]]:
        """The entries after the view's while not parsed: the journal's, then the added."""
        return [*self.tail, *self.pending]

    def size(self) -> int:
        """How many entries (the view's and those added, unparsed)."""
        if self._parse is not None and self.view is not None:
            return len(self.view.starts) + len(self.tail) + len(self.pending)
        return len(self.entries)

    def line_at(self, i: int) -> str:
        if self._parse is not None and self.view is not None:
            known = len(self.view.starts)
            return (self.view.line(i) if i < known
                    else self.line(self._extra()[i - known]))
        return self.line(self.entries[i])

    def pinned(self) -> list[int]:
        """The entries a prompt shows first, whatever their age (a task's own line)."""
        if self._parse is not None and self.view is not None:
            known = len(self.view.starts)
            return [*self.view.pinned, *[known + i for i, e in
                                         enumerate(self._extra())
                                         if e.get("pinned")]]
        return [i for i, e in enumerate(self.entries) if e.get("pinned")]

    def _viewed_by(self, count: TokenCounter) -> rendered.View | None:
        """The view, if it holds all there is and `count` made its counts."""
        view = self.view
        if (self._parse is not None and view is not None
                and view.counter == rendered.counter_id(count)):
            return view
        return None

    def tokens(self, count: TokenCounter) -> int:
        """The rendered text's tokens as `count` counts them (the view's, if it holds)."""
        view = self._viewed_by(count)
        if view is not None and not self.tail and not self.pending:
            return view.tokens
        return count(self.render())

    def costs(self, count: TokenCounter) -> list[int]:
        """Each line's tokens + 1 (its newline) as `count` counts them: the view's when
        it was counted by the same counter."""
        view = self._viewed_by(count)
        if view is not None:
            return [*view.costs,
                    *[count(self.line(e)) + 1 for e in self._extra()]]
        return [count(self.line_at(i)) + 1 for i in range(self.size())]

    def render(self) -> str:
        if self._parse is not None and self.view is not None:
            extra = self._extra()
            if not extra:
                return self.view.text
            head = self.view.text + "\n" if self.view.text else f"## {self.type}\n"
            return head + "\n".join(self.line(e) for e in extra)
        if not self.entries:
            return ""
        shown = self._shown
        if shown is not None and shown[0] == self.entries:
            return shown[1]
        text = self.render_entries()
        self._shown = (list(map(dict, self.entries)), text)
        return text

    def rendered_as(self, text: str) -> None:
        """`text` is the render of the entries as they are now (made by the caller)."""
        self._shown = (list(map(dict, self.entries)), text)

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
