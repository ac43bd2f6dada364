"""Tasks move atomically between queue, active, done and failed - never lost, never twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from citizen.home.tasks import TaskError, TaskQueue
from shared.atomic import CorruptFile


@pytest.fixture
def queue(tmp_path: Path) -> TaskQueue:
    q = TaskQueue(tmp_path / "tasks")
    q.init()
    return q


def where(q: TaskQueue, task_id: str) -> list[str]:
    return [s for s in ("queue", "active", "done", "failed") if task_id in q.ids(s)]


def test_fifo_claim_and_finish(queue: TaskQueue) -> None:
    first, second = queue.add("one"), queue.add("two")
    assert queue.peek() == first.id
    task = queue.claim(first.id)
    assert (task.status, task.attempts) == ("active", 1)
    assert where(queue, first.id) == ["active"]
    # One active at a time: a second claim returns the active task.
    assert queue.claim(second.id).id == first.id
    queue.finish(task, "done", "did it")
    assert where(queue, first.id) == ["done"]
    assert queue.load("done", first.id).result == "did it"
    assert queue.peek() == second.id


def test_peek_prefers_kinds(queue: TaskQueue) -> None:
    queue.add("plain")
    code = queue.add("fix it", kind="CODE")
    assert queue.peek(("CODE",)) == code.id
    assert queue.peek(("DEBUG",)) == queue.ids("queue")[0]  # nothing of that kind: the oldest


def test_unknown_kind(queue: TaskQueue) -> None:
    with pytest.raises(TaskError, match="unknown task kind"):
        queue.add("x", kind="NAP")


def test_recover_requeues_the_interrupted_task_once(queue: TaskQueue) -> None:
    task = queue.claim(queue.add("interrupted").id)
    notes = queue.recover()
    assert where(queue, task.id) == ["queue"] and "requeued" in notes[0]
    assert queue.recover() == []  # running it again changes nothing
    again = queue.claim(task.id)
    assert again.attempts == 2


def test_recover_files_a_task_that_had_finished(queue: TaskQueue, tmp_path: Path) -> None:
    task = queue.claim(queue.add("finished just before the crash").id)
    # Simulate a crash between recording the outcome and the rename.
    task.status, task.result = "done", "ok"
    path = tmp_path / "tasks" / "active" / f"{task.id}.json"
    path.write_text(json.dumps(task.to_dict()))
    queue.recover()
    assert where(queue, task.id) == ["done"]  # not run a second time


def test_corrupt_task_is_kept_aside_with_a_reason(queue: TaskQueue, tmp_path: Path) -> None:
    task = queue.add("will be corrupted")
    (tmp_path / "tasks" / "queue" / f"{task.id}.json").write_text('{"schema_version": 1, "id"')
    with pytest.raises(CorruptFile, match="not valid JSON"):
        queue.claim(task.id)
    kept = tmp_path / "tasks" / "corrupt" / f"{task.id}.json"
    assert kept.read_text() == '{"schema_version": 1, "id"'  # untouched, for inspection
    assert queue.peek() is None
