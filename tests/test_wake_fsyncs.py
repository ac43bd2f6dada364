"""What a working wake fsyncs, and that each fsync it no longer makes loses nothing.

A wake's blobs share one directory fsync at the log's close (before the log's own); a
task's progress and outcome are fsynced whole, their directory not (only the claim is).
The crash side: a wake killed with -9 before its log is closed leaves a log that reads,
and every blob its lines name is there, whole.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from citizen.config import paths
from citizen.home import wakelog
from citizen.home.tasks import TaskQueue
from citizen.home.wakelog import WakeLog

ROOT = Path(__file__).resolve().parent.parent


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
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", _STOPPED_WAKE, str(ready)],
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), "the wake never got to the middle"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    home = paths.home("opus")
    events = wakelog.read(home.wake_logs / "000009-TASK.jsonl")
    assert [e["event"] for e in events] == ["wake_start"] + ["prompt"] * 20
    for i, event in enumerate(events[1:]):
        (key,) = event["system_blobs"]
        text = WakeLog.read_blob(home, key)
        assert text == f"block {i} " * 200
        assert hashlib.sha256(text.encode()).hexdigest()[:24] == key
