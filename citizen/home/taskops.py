"""What the operator does to a citizen's tasks from the shell: cancel and retry.

On a server root does this in a home the citizen owns and writes, so nothing here
follows a link the citizen planted: every directory is opened with O_NOFOLLOW below
`tasks/`, a task file is read with O_NOFOLLOW (a link or a FIFO is no task), moved with
`rename` between directory descriptors (which moves a link itself, never its target),
and rewritten through a temporary file created O_EXCL in the same directory. The files
root makes are handed to the citizen (`owner`). A task file is the citizen's data: one
that does not parse is reported and left where it is.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from citizen.home.tasks import CANCEL, SCHEMA_VERSION, Task, TaskError, TaskQueue, now_iso
from shared import door
from shared.atomic import CorruptFile, replace_in

Owner = tuple[int, int] | None


class TaskFinished(TaskError):
    """The task is already done, failed or cancelled (nothing to cancel)."""


class NotRetryable(TaskError):
    """Only a failed or cancelled task can go back to the queue."""


@contextmanager
def _dir(tasks: Path, state: str, owner: Owner) -> Iterator[int]:
    """A descriptor of `tasks/<state>`, made (and handed to `owner`) when missing."""
    top = os.open(tasks, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            # 0750 like the rest of the home: the citizen writes, its group may look.
            os.mkdir(state, 0o750, dir_fd=top)
            made = True
        except FileExistsError:
            made = False
        try:
            fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
        except OSError as exc:  # ELOOP / ENOTDIR: a link or a file planted there
            raise TaskError(f"{tasks / state} is a symbolic link or not a directory; nothing "
                            "was changed - remove it and try again") from exc
    finally:
        os.close(top)
    try:
        if made and owner is not None:
            os.fchown(fd, *owner)  # the home's owner owns what is made in it
        yield fd
    finally:
        os.close(fd)


def _read(dir_fd: int, name: str, shown: Path) -> Task:
    """The task in `name` (O_NOFOLLOW, O_NONBLOCK: a link or a FIFO is no task)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise CorruptFile(shown, f"not a plain file ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise CorruptFile(shown, "not a plain file")
        raw = fh.read(4 * 2**20)
    try:
        data = door.loads(raw)  # root reads it: 100,000 `[` is no task
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, nested too deep
        raise CorruptFile(shown, f"not JSON ({exc})") from exc
    if not isinstance(data, dict) or data.pop("schema_version", None) != SCHEMA_VERSION:
        raise CorruptFile(shown, f"not a task of schema_version {SCHEMA_VERSION}")
    try:
        return Task(**data)
    except TypeError as exc:
        raise CorruptFile(shown, f"not a task ({exc})") from exc


def _write(dir_fd: int, name: str, data: bytes, owner: Owner) -> None:
    """Replace `name` in `dir_fd` atomically (shared.atomic.replace_in: a link there is
    replaced, not followed)."""
    # 0640 as every task file: the citizen writes, its group may read (peer monitoring).
    replace_in(dir_fd, name, data, 0o640, owner)


def _raw(task: Task) -> bytes:
    return json.dumps(task.to_dict(), ensure_ascii=False, separators=(",", ":")).encode()


def _move(queue: TaskQueue, task_id: str, src: str, dst: str, *, event: dict[str, Any],
          status: str, owner: Owner, reset: bool = False) -> Task:
    """Move a task from `src` to `dst` (one rename: it is in exactly one state at every
    moment), then write `event` into its history and its new `status`."""
    name = f"{task_id}.json"
    with _dir(queue.root, src, owner) as sfd, _dir(queue.root, dst, owner) as dfd:
        task = _read(sfd, name, queue.dir(src) / name)  # a bad file stays where it is
        os.rename(name, name, src_dir_fd=sfd, dst_dir_fd=dfd)
        if reset:  # the counters that end a task start again; the history keeps them
            event = {**event, "previous_attempts": task.attempts,
                     "previous_calls": task.meta.get("calls", 0),
                     "previous_result": task.result[:500]}
            task.attempts, task.result = 0, ""
            task.meta.pop("calls", None)
            task.meta.pop("refused_done", None)
        task.status = status
        task.history.append({"ts": now_iso(), **event})
        _write(dfd, name, _raw(task), owner)
    return task


def cancel(queue: TaskQueue, task_id: str, *, wake_running: bool, by: str,
           owner: Owner = None) -> tuple[Task, str]:
    """Cancel a queued, held or active task; returns it and what happened.

    An active task a wake may be working on right now (`wake_running`) is not moved under
    the wake: a request is left in `tasks/cancel/` and the wake stops at its next turn and
    files it cancelled (so what it already did is recorded, and it never writes a task
    that has moved). With no wake running it is filed cancelled at once.

    :raises TaskFinished: it is done, failed or cancelled already.
    :raises TaskError: there is no such task.
    :raises CorruptFile: its file does not parse (it is left as it is).
    """
    state = queue.where(task_id)
    event: dict[str, Any] = {"event": "cancelled", "by": by}
    if state in ("queue", "held") or (state == "active" and not wake_running):
        try:
            return _move(queue, task_id, state, "cancelled", event=event, status="cancelled",
                         owner=owner), "cancelled"
        except FileNotFoundError:  # a wake claimed it this instant: ask that wake instead
            state = queue.where(task_id)
    if state == "active":
        name = f"{task_id}.json"
        with _dir(queue.root, "active", owner) as afd:
            task = _read(afd, name, queue.dir("active") / name)
        request = json.dumps({"ts": now_iso(), "by": by}).encode()
        with _dir(queue.root, CANCEL, owner) as cfd:
            _write(cfd, name, request, owner)
        return task, "requested"
    if state in ("done", "failed", "cancelled"):
        raise TaskFinished(f"task {task_id} is already finished ({state}); nothing to cancel")
    raise TaskError(f"no task {task_id}")


def retry(queue: TaskQueue, task_id: str, *, by: str, owner: Owner = None) -> Task:
    """Put a failed or cancelled task back in the queue, its history kept and its
    attempt and call counters started again (their old values in the history).

    :raises NotRetryable: it is queued, active, held or done.
    :raises TaskError: there is no such task.
    """
    state = queue.where(task_id)
    if state in ("failed", "cancelled"):
        # A request left behind by a crash goes too.
        with _dir(queue.root, CANCEL, owner) as cfd, suppress(FileNotFoundError):
            os.unlink(f"{task_id}.json", dir_fd=cfd)
        return _move(queue, task_id, state, "queue", event={"event": "retried", "by": by,
                                                            "from": state},
                     status="queued", owner=owner, reset=True)
    if state is None or state == "corrupt":
        raise TaskError(f"no task {task_id}" if state is None else
                        f"task {task_id} is in {queue.dir('corrupt')}: its file does not "
                        "parse - fix or remove it by hand")
    why = {"queue": "it is queued already", "active": "a wake is working on it",
           "held": "it waits for a stream to decide who takes it",
           "done": "it is done"}[state]
    raise NotRetryable(f"task {task_id} cannot be retried: {why} (only a failed or "
                       "cancelled task goes back to the queue)")
