"""Backups that restore (restic): a snapshot between wakes, a restore that brings a
citizen back, a backup killed mid-run that loses nothing, retention by world days.

The finding on the old code: there was no backup - DEPLOY.md offered a manual `tar`,
and a disk failure or a bad self-edit lost a citizen's identity, memory and history."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from citizen import backup, paths, quiesce
from citizen.tasks import TaskQueue
from shared import clock

pytestmark = pytest.mark.skipif(shutil.which("restic") is None,
                                reason="restic is not installed (apt-get install restic)")
MONDAY = 1767571200.0  # 2026-01-05T00:00:00Z


@pytest.fixture
def repo(civ: Path) -> backup.Repository:
    return backup.Repository.default()  # <root>.backup beside the test's civilization


def test_a_snapshot_brings_back_a_broken_citizen_and_only_it(
        civ: Path, repo: backup.Repository) -> None:
    opus = paths.home("opus")
    task = TaskQueue(opus.tasks).add("Write notes/a.md").id
    identity = (opus.contexts / "identity.json").read_bytes()
    done = backup.take(repo)
    assert done["quiescent"] and done["files"] > 10 and "key" in done["made"][0]
    # A bad self-edit: identity overwritten, the task queue gone; mira works on meanwhile.
    (opus.contexts / "identity.json").write_text("{}")
    shutil.rmtree(opus.tasks)
    TaskQueue(paths.home("mira").tasks).add("after the snapshot")
    assert backup.restore(repo, "latest", "opus") == [opus.dir]
    assert (opus.contexts / "identity.json").read_bytes() == identity
    assert TaskQueue(opus.tasks).where(task) == "queue"
    assert TaskQueue(paths.home("mira").tasks).counts()["queue"] == 1  # not rolled back
    assert "no errors were found" in backup.verify(repo, "100%")


def test_restore_refuses_while_the_daemon_runs(civ: Path, repo: backup.Repository) -> None:
    backup.take(repo)
    paths.home("opus").heartbeat.write_text(json.dumps(
        {"state": "sleeping", "pid": os.getpid(), "updated": clock.now()}))
    with pytest.raises(backup.BackupError, match="stop opus first"):
        backup.restore(repo, "latest", "opus")


def test_a_backup_reads_between_wakes(civ: Path, repo: backup.Repository,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon holds the quiescent-point lock through each wake; the backup reads
    only once it is let go (and, past --wait, reads anyway and says so)."""
    from citizen.daemon import Daemon, WakeRequest

    seen: list[bool] = []
    daemon = Daemon("opus")
    def wake(req: WakeRequest) -> None:  # inside a wake, a backup cannot start
        with quiesce.still(0) as quiet:
            seen.append(quiet)
    monkeypatch.setattr(daemon, "_wake", wake)
    daemon._run_wake(WakeRequest("TASK", "test"))
    assert seen == [False]

    released: list[float] = []
    read: list[float] = []
    real = backup.Repository.restic
    def restic(self: backup.Repository, *args: str, **kw: float) -> str:
        if args[0] == "backup":
            read.append(time.monotonic())
        return real(self, *args, **kw)
    monkeypatch.setattr(backup.Repository, "restic", restic)
    def busy_wake() -> None:
        with quiesce.working():
            time.sleep(1.0)
            released.append(time.monotonic())
    worker = threading.Thread(target=busy_wake)
    worker.start()
    time.sleep(0.2)
    assert backup.take(repo, wait_s=30)["quiescent"]
    worker.join()
    assert read[0] >= released[0]  # it waited for the wake to end
    with quiesce.working():  # a wake that outlasts --wait
        late = backup.take(repo, wait_s=0.3)
    assert not late["quiescent"]
    tags = [s["tags"] for s in backup.snapshots(repo)]
    assert tags == [["experience"], ["experience", "not-quiescent"]]


def test_kill_9_mid_backup_keeps_the_earlier_snapshots_and_the_next_run_completes(
        civ: Path, repo: backup.Repository) -> None:
    first = backup.take(repo)["snapshot"]
    # Enough new data (incompressible) that the next backup is still writing when killed.
    with (paths.home("opus").dir / "big.bin").open("wb") as fh:
        for _ in range(48):
            fh.write(os.urandom(4 << 20))
    run = subprocess.Popen([sys.executable, "-m", "citizen", "backup", "now"],
                           env={**os.environ}, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    data = repo.path / "data"
    packs = {p for p in data.rglob("*") if p.is_file()}
    while time.monotonic() < deadline and run.poll() is None:
        if _restic_backing_up(run.pid) and {p for p in data.rglob("*") if p.is_file()} - packs:
            break  # restic is writing the new snapshot's data
        time.sleep(0.05)
    assert run.poll() is None, "the backup ended before it could be killed"
    killed = [c.pid for c in psutil.Process(run.pid).children(recursive=True)]
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    # Gone, as init reaps it (restic takes a lock whose process still exists, even as a
    # zombie, for a live one).
    wait_until(lambda: not any(psutil.pid_exists(pid) for pid in killed))
    ids = [s["id"][:8] for s in backup.snapshots(repo)]  # restic 0.14 reports short ids
    assert ids == [first[:8]]  # nothing half-made
    second = backup.take(repo)  # the killed run's lock is stale: removed, not waited on
    assert [s["id"][:8] for s in backup.snapshots(repo)] == [first[:8], second["snapshot"][:8]]
    assert second["files"] > 0
    assert "no errors were found" in backup.verify(repo)


def wait_until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.1)


def _restic_backing_up(pid: int) -> bool:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return False
    for child in children:
        try:
            if child.name() == "restic" and "backup" in child.cmdline():
                return True
        except psutil.Error:  # exited meanwhile (a zombie has no command line)
            continue
    return False


def test_retention_keeps_the_days_and_weeks_asked_for(
        civ: Path, repo: backup.Repository, monkeypatch: pytest.MonkeyPatch) -> None:
    for day in range(10):  # Monday 5 January .. Wednesday 14 January, world time
        monkeypatch.setenv(clock.CLOCK_ENV, f"{MONDAY + day * 86400 + 3600},{time.time()},1")
        backup.take(repo, keep_daily=3, keep_weekly=2)
    days = [s["time"][:10] for s in backup.snapshots(repo)]
    # The last 3 days, and the last snapshot of each of the last 2 weeks (Sunday the 11th).
    assert days == ["2026-01-11", "2026-01-12", "2026-01-13", "2026-01-14"]
