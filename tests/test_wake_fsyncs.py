"""What a working wake fsyncs, and that each fsync it no longer makes loses nothing.

The 13 fsyncs of a TASK wake (claim, progress, complete), store by store, and what each
protects:
- state.json: its temp file and the home's directory (2) - the wake number is never
  handed out twice;
- the task: the claim's file and tasks/active/ (2) - no run without its attempt
  counted; each later version's data (deliverables, progress, outcome: 3), so the name
  never points at a torn task (a lost rename leaves the version before, whole);
- blobs: each new blob's data (3 here: the blocks that change each wake) and logs/blobs/
  once, at the log's close, before the log;
- contexts: the history journal's appended line (1);
- the wake log: once, at its close (1) - its events are appended without fsync;
- memory: none - its index is a cache of the memory files (tests/test_memory.py).
A wake process killed with -9 before its log is closed leaves a log that reads, and
every blob its lines name is there, whole.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from citizen.config import paths
from citizen.home import wakelog
from citizen.home.tasks import TaskQueue
from citizen.home.wakelog import WakeLog
from citizen.wake.flow import run_wake
from tests.daemons import kill_when_ready
from tests.scripts import Actor, call, provides


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every fsync from here on, as "dir <path>" or "file <path>", in order."""
    seen: list[str] = []
    real: Callable[[int], None] = os.fsync

    def spy(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        seen.append(f"{kind} {Path(f'/proc/self/fd/{fd}').readlink()}")
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def test_a_wakes_new_blobs_share_one_directory_fsync_before_the_logs(
        civ: Path, fsyncs: list[str]) -> None:
    log = WakeLog(paths.home("opus"), 7, "TASK")
    log.event("wake_start")
    log.event("prompt", system_blobs=[log.blob("identity " * 40), log.blob("history " * 40)])
    log.event("prompt", system_blobs=[log.blob("identity " * 40)])  # stored already
    log.close()
    blobs = log.blobs.resolve()
    dirs = [f for f in fsyncs if f.startswith("dir")]
    assert dirs == [f"dir {blobs}"], "one directory fsync for the wake's new blobs"
    files = [f for f in fsyncs if f.startswith("file")]
    assert len(files) == 3  # each new blob's data, before its name appears; then the log
    assert all(f.startswith(f"file {blobs}/.") for f in files[:2])  # the temp files
    assert fsyncs[-2:] == [f"dir {blobs}", f"file {log.path.resolve()}"]


def test_a_wake_with_no_new_blob_fsyncs_only_its_log(civ: Path, fsyncs: list[str]) -> None:
    first = WakeLog(paths.home("opus"), 1, "TASK")
    first.blob("identity")
    first.close()
    fsyncs.clear()
    log = WakeLog(paths.home("opus"), 2, "TASK")
    log.event("prompt", system_blobs=[log.blob("identity")])
    log.close()
    assert fsyncs == [f"file {log.path.resolve()}"]


def test_progress_and_outcome_fsync_the_task_not_its_directory(
        tmp_path: Path, fsyncs: list[str]) -> None:
    queue = TaskQueue(tmp_path / "tasks")
    queue.init()
    task = queue.claim(queue.add("write the report").id)
    active = (tmp_path / "tasks" / "active").resolve()
    assert fsyncs[-1] == f"dir {active}"  # the claim is durable, its name included
    fsyncs.clear()
    queue.progress(task, "half of it")
    queue.finish(task, "done", "the report")
    assert [f.split(" ", 1)[0] for f in fsyncs] == ["file", "file"]
    assert queue.load("done", task.id).result == "the report"


# A wake that stops for good in the middle: a blob stored, lines logged, never closed.
_STOPPED_WAKE = """
import signal, sys
from pathlib import Path
from citizen.config import paths
from citizen.home.wakelog import WakeLog

log = WakeLog(paths.home("opus"), 9, "TASK")
log.event("wake_start", citizen="opus")
for i in range(20):
    log.event("prompt", purpose=f"call {i}", system_blobs=[log.blob(f"block {i} " * 200)])
Path(sys.argv[1]).touch()
signal.pause()
"""


def test_a_wake_killed_before_its_log_is_closed_leaves_a_readable_log(
        civ: Path, tmp_path: Path) -> None:
    kill_when_ready(_STOPPED_WAKE, tmp_path / "ready")
    home = paths.home("opus")
    events = wakelog.read(home.wake_logs / "000009-TASK.jsonl")
    assert [e["event"] for e in events] == ["wake_start"] + ["prompt"] * 20
    for i, event in enumerate(events[1:]):
        (key,) = event["system_blobs"]
        text = WakeLog.read_blob(home, key)
        assert text == f"block {i} " * 200
        assert hashlib.sha256(text.encode()).hexdigest()[:24] == key


def test_a_working_wake_fsyncs_each_store_only_where_a_crash_needs_it(
        civ: Path, fsyncs: list[str]) -> None:
    """One TASK wake (a scripted model: progress, then complete) and the fsyncs it makes,
    store by store - the table this module's docstring describes."""
    home = paths.home("opus")
    tasks = TaskQueue(home.tasks)
    for i in range(3):  # the last wake: stable blocks stored, history's journal begun
        tasks.add(f"task {i}")
        fsyncs.clear()
        result = run_wake("opus", wake_type="TASK", provider=provides(Actor(
            call("task_progress", note="half"), call("task_complete", summary="done"))))
        assert result.status == "ok"
    root = home.dir.resolve()
    seen = [(kind, str(Path(where).relative_to(root)))
            for kind, where in (f.split(" ", 1) for f in fsyncs)]
    dirs = sorted(where for kind, where in seen if kind == "dir")
    # state.json's rename (the wake number), the claim, and once for all new blobs
    assert dirs == [".", "logs/blobs", "tasks/active"]
    files = [where for kind, where in seen if kind == "file"]
    assert not [f for f in files if f.startswith("memory/")]  # the index is a cache
    assert [f for f in files if f.startswith("logs/wakes/")] == ["logs/wakes/000003-TASK.jsonl"]
    assert [f for f in files if f.startswith("contexts/")] == ["contexts/history.jsonl"]
    # the claim, the deliverables fixed, the progress, the outcome: each version whole
    assert len([f for f in files if f.startswith("tasks/active/")]) == 4
    assert len(fsyncs) == 13, "a new fsync in a wake: add it to the docstring's table"
