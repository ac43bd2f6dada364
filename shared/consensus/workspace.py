"""A Thought World task's scratch space (the seed's `workspace/{task_id}/`).

    workspace/<task>/context.md     the task as asked (written once, by its opener)
    workspace/<task>/notes/         the shared scratchpad: one record per note, its file
                                    owned by its author (the seed's single `notes.md`,
                                    which any participant could rewrite, would let one
                                    citizen put words in another's name)
    workspace/<task>/artifacts/     intermediate outputs: each step's execution results,
                                    one record each (`records.add`); only the one by that
                                    proposal's executor counts (anyone can add a file
                                    here: a planted one neither shows nor blocks it)

`<task>` is the id of the proposal that opened the task (`tasks.chain_of`), so every
step of a chained task shares one workspace. Everything here is data for the next
step's prompt, never trusted for a decision: the decisions are the proposals' records.

On several servers (`remote`) the same names are keys the broker keeps: the context a
record created once (a second opener's `Taken` leaves the first's), each note and each
artifact a record created once under a time-sortable name - its author the broker's
word, so no note can be put in another's name, as the file's owner ensures here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from shared import clock, door, records
from shared.layout import Layout
from shared.remote import Remote, Taken, key

CONTEXT_MODE = 0o644  # its opener writes it once; every citizen reads
CONTEXT_CAP = 1 << 20  # a task's words; a bigger context.md is a peer's, not a task's
NOTE_CHARS = 1000
SHOWN_NOTES = 20  # the latest notes shown to a step; older ones stay on disk


class Workspace:
    """The workspaces of one commons."""

    def __init__(self, shared_dir: Path, enforce: bool,
                 executor: Callable[[str], str | None] = lambda pid: None,
                 remote: Remote | None = None) -> None:
        self.top = shared_dir
        self.dir = Layout(shared_dir).workspace
        self.enforce = enforce
        self.executor = executor  # proposal id -> its executor (from its own records)
        self.remote = remote

    def _key(self, task: str, name: str) -> str:
        return key(self.top, self.path(task) / name)

    def _add(self, remote: Remote, task: str, sub: str, author: str,
             data: Mapping[str, Any]) -> Path:
        """A note or artifact through the broker, under a name nobody takes first."""
        name = f"{clock.moment():%Y%m%dT%H%M%S%f}-{author}-{secrets.token_hex(4)}.json"
        remote.create(self._key(task, f"{sub}/{name}"), dict(data))
        return self.path(task) / sub / name

    def _found(self, task: str, sub: str) -> list[dict[str, Any] | None]:
        """The records of a task's `sub` folder, as `records.read` gives them (the author
        the broker's, whatever the data says)."""
        if self.remote is None:
            folder = self.path(task) / sub
            if not folder.is_dir():
                return []
            return [records.read(p, None, self.enforce) for p in sorted(folder.glob("*.json"))]
        return [{**r["data"], records.AUTHOR: r["author"]}
                for r in self.remote.records(self._key(task, sub))]

    def path(self, task: str) -> Path:
        return self.dir / task

    def open(self, task: str, text: str, opener: str) -> None:
        """Make `task`'s workspace with its context (once: a later step leaves it)."""
        data = f"# Task {task}\n\nOpened by {opener} at {clock.now()}.\n\n{text}\n"
        if self.remote is not None:
            with contextlib.suppress(Taken):  # a concurrent opener made it: theirs stands
                self.remote.create(self._key(task, "context.md"), {"text": data})
            return
        folder = self.path(task)
        # Record directories (3775): every participant adds its own notes and artifacts;
        # the sticky bit stops anyone removing or replacing another's.
        for sub in (folder / "notes", folder / "artifacts"):
            records.make_dirs(sub, self.top)
        context = folder / "context.md"
        if not context.exists():
            try:
                with context.open("x", encoding="utf-8") as fh:
                    os.fchmod(fh.fileno(), CONTEXT_MODE)  # the file we made, not a name
                    fh.write(data)
            except FileExistsError:  # a concurrent opener made it first: theirs stands
                pass

    def note(self, task: str, author: str, text: str) -> Path:
        """Add `author`'s note to the scratchpad."""
        note = {"task": task, "note": text[:NOTE_CHARS], "ts": clock.now()}
        if self.remote is not None:
            return self._add(self.remote, task, "notes", author, note)
        return records.add(self.top, self.path(task) / "notes", author, note)

    def artifact(self, task: str, pid: str, step: int, author: str,
                 data: Mapping[str, Any]) -> None:
        """`author`'s intermediate output of proposal `pid`, the task's step `step` - under a
        name nobody can take first (`records.add`): a planted file never blocks it."""
        if self.remote is not None:
            self._add(self.remote, task, "artifacts", author,
                      {**data, "proposal": pid, "step": step})
            return
        records.add(self.top, self.path(task) / "artifacts", author,
                    {**data, "proposal": pid, "step": step})

    def notes(self, task: str) -> list[dict[str, Any]]:
        """The scratchpad's notes, oldest first (a note whose file is not its author's
        counts for nothing)."""
        found = self._found(task, "notes")
        return [{"author": n[records.AUTHOR], "ts": n.get("ts"), "note": str(n.get("note"))}
                for n in found if n is not None]

    def artifacts(self, task: str) -> list[dict[str, Any]]:
        """Each step's artifact, by proposal id: forged ones, and any but its proposal's
        executor's, left out."""
        found = self._found(task, "artifacts")
        first: dict[str, dict[str, Any]] = {}  # one per step: a retry's copy is left out
        for a in found:
            if a is not None and a[records.AUTHOR] == self.executor(str(a.get("proposal"))):
                first.setdefault(str(a["proposal"]), a)
        return list(first.values())

    def context(self, task: str) -> str:
        """The task as asked ('' before its workspace is opened)."""
        if self.remote is not None:
            rec = self.remote.read(self._key(task, "context.md"))
            return str(rec["data"].get("text", "")) if rec is not None else ""
        # Through the door: the opener owns the file and may swap it for a link to what
        # only the reader can read, or a FIFO - read as neither, and at most CONTEXT_CAP.
        try:
            raw = door.read_capped(self.path(task) / "context.md", CONTEXT_CAP,
                                   beneath=self.dir)
        except OSError:  # none yet, or no plain file of its size: no context shown
            return ""
        return raw.decode(errors="replace")

    def brief(self, task: str) -> dict[str, Any]:
        """What a step's prompt shows of the workspace: the context, the latest notes and
        each artifact's outcome."""
        return {"task": task, "path": str(self.path(task)),
                "context_md": self.context(task)[:4000],
                "notes": self.notes(task)[-SHOWN_NOTES:],
                "artifacts": [{"proposal": a.get("proposal"), "step": a.get("step"),
                               "success": a.get("success"),
                               "results": [{k: str(r.get(k))[:300] for k in ("tool", "ok",
                                                                            "output")}
                                           for r in a.get("results", [])
                                           if isinstance(r, Mapping)][:8]}
                              for a in self.artifacts(task)]}
