"""A citizen's tasks: `tasks/{queue,active,done,failed,cancelled}/<id>.json`.

A task moves between directories only by `os.rename`, which is atomic, and its
content changes only by atomic rewrite in place. So after a `kill -9` at any
moment every task file is whole and in exactly one directory. One task is active
at a time; a task left in `active/` by a crash goes back to the queue on start,
unless its content already records that it finished, or the operator cancelled it.

The operator cancels and retries tasks from the shell (`citizen.home.taskops`): a
cancelled task lives in `cancelled/`, which nothing claims from; cancelling the task a
wake is working on leaves a request in `cancel/<id>.json`, which the wake honours
between turns (`cancel_requested`) and `finish` and `recover` file as cancelled.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citizen.errors import CitizenError
from shared import clock, door
from shared.atomic import CorruptFile, NotPlain, create_beneath, open_plain, write_json

SCHEMA_VERSION = 1
# Every state a task can be in; only `queue` and `active` are ever claimed from.
STATES = ("queue", "active", "done", "failed", "cancelled")
FINISHED = ("done", "failed", "cancelled")
CANCEL = "cancel"  # tasks/cancel/<id>.json: the operator cancelled the task a wake works on
TASK_KINDS = ("TASK", "CODE", "DEBUG", "RESEARCH", "CONSENSUS", "DEBATE")
MAX_BYTES = 4 * 2**20  # a task is its text and history; a bigger file is no task


class TaskError(CitizenError, LookupError):
    """A task is not where an operation expects it."""


def now_iso() -> str:
    """The current UTC time in the one timestamp format (`shared.clock`)."""
    return clock.now()


def new_id() -> str:
    """Time-sortable (to the microsecond, so the queue is FIFO) and unique:
    `t-20261122T120000.123456-1a2b3c`."""
    now = clock.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return f"t-{stamp}.{int(now % 1 * 1e6):06d}-{secrets.token_hex(3)}"


@dataclass
class Task:
    """One task and its history."""

    id: str
    text: str
    kind: str = "TASK"
    source: str = "cli"
    created: str = field(default_factory=now_iso)
    status: str = "queued"
    attempts: int = 0
    result: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **self.__dict__}

    @classmethod
    def from_file(cls, path: Path) -> Task:
        """Load a task file.

        :raises CorruptFile: it does not parse or lacks required fields.
        """
        try:
            data = door.loads(_plain_bytes(path))  # root reads it: 100,000 `[` is no task
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, nested too deep
            raise CorruptFile(path, f"not valid JSON ({exc})") from exc
        found = data.pop("schema_version", None) if isinstance(data, dict) else None
        if found != SCHEMA_VERSION:
            raise CorruptFile(path, f"schema_version {found!r}, expected {SCHEMA_VERSION}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise CorruptFile(path, f"not a task ({exc})") from exc


def _plain_bytes(path: Path) -> bytes:
    """The bytes of the task file `path`: root reads the citizen's files (`citizen task`),
    so O_NOFOLLOW (a link must not lead it to a file the citizen cannot read), O_NONBLOCK
    (a FIFO must not hang it) and at most MAX_BYTES (a huge file must not fill memory).

    :raises CorruptFile: not a plain file, or too big. :raises FileNotFoundError: gone.
    """
    try:
        fh = open_plain(path)
    except FileNotFoundError:
        raise
    except NotPlain as exc:
        raise CorruptFile(path, "not a plain file") from exc
    except OSError as exc:
        raise CorruptFile(path, f"not a plain file ({exc.strerror})") from exc
    with fh:
        raw = fh.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise CorruptFile(path, f"not valid JSON (over {MAX_BYTES} bytes: no task is)")
    return raw


class TaskQueue:
    """The four task directories of one citizen."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def dir(self, state: str) -> Path:
        return self.root / state

    def init(self) -> None:
        for state in (*STATES, "corrupt"):
            self.dir(state).mkdir(parents=True, exist_ok=True)

    def _path(self, state: str, task_id: str) -> Path:
        return self.dir(state) / f"{task_id}.json"

    def add(self, text: str, *, kind: str = "TASK", source: str = "cli",
            meta: dict[str, Any] | None = None, owner: tuple[int, int] | None = None,
            task_id: str | None = None) -> Task:
        """Queue a new task (`owner`: hand the file to the citizen when root writes it;
        `task_id`: a deterministic id, for intake that must never queue a message twice)."""
        if kind not in TASK_KINDS:
            raise TaskError(f"unknown task kind '{kind}' - use one of {', '.join(TASK_KINDS)}")
        task = Task(id=task_id or new_id(), text=text, kind=kind, source=source,
                    meta=meta or {})
        task.history.append({"ts": task.created, "event": "queued", "source": source})
        if owner is None:  # the citizen's own process: its other task directories too
            self.init()
        if task_id is not None and owner is None:  # intake: the same message, the same file
            write_json(self._path("queue", task.id), task.to_dict(), owner=owner)
            return task
        # A new file, and no link below the home followed on the way: root (or the
        # developer) writing here must not be led out by a link the citizen planted.
        raw = json.dumps(task.to_dict(), ensure_ascii=False, separators=(",", ":")).encode()
        where = Path(self.root.name, "queue", f"{task.id}.json")
        try:
            create_beneath(self.root.parent, where, raw, owner=owner)
        except FileExistsError as exc:
            raise TaskError(f"{self.root.parent / where} exists already (a link planted "
                            "there?); nothing was written - remove it and add the task "
                            "again") from exc
        return task

    def hold(self, text: str, *, kind: str, source: str, meta: dict[str, Any],
             task_id: str) -> Task:
        """Keep a task aside until a stream decides who takes it (a mail to several
        citizens): `release` queues it, `dismiss` files it as left to another."""
        task = Task(id=task_id, text=text, kind=kind, source=source, meta=meta)
        task.history.append({"ts": task.created, "event": "held", "source": source,
                             "stream": meta.get("stream")})
        self.dir("held").mkdir(parents=True, exist_ok=True)
        write_json(self._path("held", task.id), task.to_dict())
        return task

    def held(self) -> list[Task]:
        out = []
        for task_id in self.ids("held"):
            try:
                out.append(self.load("held", task_id))
            except CorruptFile:  # kept for inspection, out of the way (as claim does)
                self.dir("corrupt").mkdir(parents=True, exist_ok=True)
                os.rename(self._path("held", task_id), self._path("corrupt", task_id))
        return out

    def release(self, task_id: str, note: str) -> None:
        """A held task becomes a queued one (this citizen was granted it)."""
        src = self._path("held", task_id)
        task = Task.from_file(src)
        task.history.append({"ts": now_iso(), "event": "released", "note": note})
        write_json(src, task.to_dict())
        os.rename(src, self._path("queue", task_id))  # one rename: queued or still held

    def dismiss(self, task_id: str, result: str) -> None:
        """A held task another citizen took: filed as done, with who took it."""
        src = self._path("held", task_id)
        task = Task.from_file(src)
        task.status, task.result = "done", result
        task.history.append({"ts": now_iso(), "event": "left to another", "result": result})
        write_json(src, task.to_dict())
        self.dir("done").mkdir(parents=True, exist_ok=True)
        os.rename(src, self._path("done", task_id))

    def ids(self, state: str) -> list[str]:
        """Task ids in a state, oldest first."""
        try:  # names only: `citizen status` counts the tasks of every citizen
            with os.scandir(self.dir(state)) as entries:
                names = [e.name for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n[:-5] for n in names if n.startswith("t-") and n.endswith(".json"))

    def where(self, task_id: str) -> str | None:
        """The state a task is in (None: no such task)."""
        return next((s for s in (*STATES, "held", "corrupt")
                     if self._path(s, task_id).exists()), None)

    def load(self, state: str, task_id: str) -> Task:
        return Task.from_file(self._path(state, task_id))

    def active(self) -> Task | None:
        """The active task, if any."""
        ids = self.ids("active")
        return self.load("active", ids[0]) if ids else None

    def peek(self, kinds: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> str | None:
        """The id of the task the next claim would take (preferring `kinds`, never one of
        `exclude`), without moving it."""
        active = self.ids("active")
        if active:
            return active[0] if not exclude or self._kind("active", active[0]) not in exclude \
                else None
        fallback = None
        for task_id in self.ids("queue"):
            kind = self._kind("queue", task_id)
            if kind is None:
                return task_id  # surface it: the claim quarantines it with a reason
            if kind in exclude:
                continue
            if not kinds or kind in kinds:
                return task_id
            fallback = fallback or task_id
        return fallback

    def next_of(self, kind: str) -> str | None:
        """The active task if it is of `kind`, else the first queued one of `kind`."""
        active = self.ids("active")
        if active:
            return active[0] if self._kind("active", active[0]) == kind else None
        return next((t for t in self.ids("queue") if self._kind("queue", t) == kind), None)

    def _kind(self, state: str, task_id: str) -> str | None:
        try:
            return self.load(state, task_id).kind
        except CorruptFile:
            return None

    def claim(self, task_id: str) -> Task:
        """Make a queued task active (or return the task already active).

        :raises CorruptFile: the task file is unusable; it was moved to `corrupt/`.
        """
        current = self.active()
        if current is not None:
            return current
        src = self._path("queue", task_id)
        try:
            task = Task.from_file(src)
        except CorruptFile:
            os.rename(src, self._path("corrupt", task_id))  # kept for inspection, out of the way
            raise
        dst = self._path("active", task_id)
        os.rename(src, dst)
        task.status = "active"
        task.attempts += 1
        task.history.append({"ts": now_iso(), "event": "claimed", "attempt": task.attempts})
        write_json(dst, task.to_dict())  # durable, directory too: no run without its attempt
        return task

    def save(self, task: Task) -> None:
        """Write the active task back (after a change to its meta)."""
        self._write_active(task)

    def progress(self, task: Task, note: str) -> None:
        """Record progress on the active task."""
        task.history.append({"ts": now_iso(), "event": "progress", "note": note})
        self._write_active(task)

    def _write_active(self, task: Task) -> None:
        # The operator filed it cancelled while this wake held it: writing it back would
        # put it in two states at once (the wake ends at its next turn, `cancel_requested`).
        if self._path("cancelled", task.id).exists():
            return
        # The data is fsynced (the name never points at a torn task), the directory is
        # not: a rename lost to a power loss leaves the version before, whole - the task as
        # a crash a moment earlier leaves it. Only the claim must be durable (`attempts`).
        write_json(self._path("active", task.id), task.to_dict(), sync_dir=False)

    def cancel_requested(self, task_id: str) -> bool:
        """Whether the operator cancelled this task while it was active (a wake working on
        it stops at its next turn and files it as cancelled)."""
        return ((self.root / CANCEL / f"{task_id}.json").exists()
                or self._path("cancelled", task_id).exists())

    def finish(self, task: Task, status: str, result: str) -> Path:
        """Move the active task to done (`status` "done"), cancelled or failed, recording why.

        The outcome is written into the task first, then the file is renamed: a
        crash in between leaves a finished task in active/, which `recover` files
        correctly instead of running it again. A task the operator cancelled while the
        wake worked on it is filed cancelled unless the wake got it done.
        """
        if status != "done" and self.cancel_requested(task.id):
            status, result = "cancelled", f"cancelled by the operator ({result[:300]})"
        if self._path("cancelled", task.id).exists():  # filed by the operator already
            self._forget_cancel(task.id)
            return self._path("cancelled", task.id)
        target = status if status in FINISHED else "failed"
        task.status = status
        task.result = result
        task.history.append({"ts": now_iso(), "event": status, "result": result[:2000]})
        src = self._path("active", task.id)
        # No directory fsync: the rename below is not fsynced either, so it bought nothing;
        # after a power loss active/ holds this version or the one before, both whole.
        write_json(src, task.to_dict(), sync_dir=False)
        dst = self._path(target, task.id)
        dst.parent.mkdir(exist_ok=True)  # cancelled/ is newer than some homes
        os.rename(src, dst)
        self._forget_cancel(task.id)
        return dst

    def _forget_cancel(self, task_id: str) -> None:
        (self.root / CANCEL / f"{task_id}.json").unlink(missing_ok=True)

    def recover(self) -> list[str]:
        """After a crash: requeue interrupted tasks (once), file finished ones. Returns notes."""
        notes = []
        for task_id in self.ids("active"):
            src = self._path("active", task_id)
            try:
                task = Task.from_file(src)
            except CorruptFile as exc:
                os.rename(src, self._path("corrupt", task_id))
                notes.append(f"{task_id}: moved to corrupt/ ({exc.problem})")
                continue
            if task.status in ("done", "failed", "stuck", "cancelled"):
                target = task.status if task.status in FINISHED else "failed"
                self.dir(target).mkdir(exist_ok=True)
                os.rename(src, self._path(target, task_id))
                self._forget_cancel(task_id)
                notes.append(f"{task_id}: had finished ({task.status}); filed")
                continue
            if self.cancel_requested(task_id):  # the operator cancelled it: never run again
                self.finish(task, "cancelled", "cancelled while its wake was interrupted")
                notes.append(f"{task_id}: cancelled by the operator; filed")
                continue
            dst = self._path("queue", task_id)
            os.rename(src, dst)
            task.status = "queued"
            task.history.append({"ts": now_iso(), "event": "requeued after interruption"})
            write_json(dst, task.to_dict())
            notes.append(f"{task_id}: interrupted; requeued")
        return notes

    def wakes_since_retry(self, task: Task) -> int:
        """The wakes that worked on `task` since the operator last retried it (a retried
        task gets its full number of wakes again; its history keeps the earlier ones)."""
        count = 0
        for entry in task.history:
            if entry.get("event") == "retried":
                count = 0
            elif entry.get("event") == "wake":
                count += 1
        return count

    def counts(self) -> dict[str, int]:
        counts = {state: len(self.ids(state)) for state in STATES}
        return {**counts, "held": len(self.ids("held"))}  # waiting for a stream's decision
