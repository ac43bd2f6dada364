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
from pathlib import Path
from typing import Any

import psutil
import pytest

from citizen import civilization
from citizen.admin import backup
from citizen.config import paths
from citizen.home import quiesce
from citizen.home.tasks import TaskQueue
from shared import clock
from tests.daemons import wait_for

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
    kept = [p for p in civ.iterdir() if p.name.startswith(".opus.before-restore-")]
    assert len(kept) == 1 and (kept[0] / "contexts" / "identity.json").read_text() == "{}"
    assert "opus.before-restore" not in " ".join(civilization.citizens())  # no citizen
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
    from citizen.daemon.process import Daemon
    from citizen.daemon.requests import WakeRequest

    daemon = Daemon("opus")
    seen: list[list[str]] = []
    def wake(req: WakeRequest) -> None:  # inside opus's wake, a backup waits for opus only
        with quiesce.still(["opus", "mira"], 0) as busy:
            seen.append(busy)
    monkeypatch.setattr(daemon, "_wake", wake)
    daemon._run_wake(WakeRequest("TASK", "test"))
    assert seen == [["opus"]]

    released: list[float] = []
    read: list[float] = []
    real = backup.Repository.restic
    def restic(self: backup.Repository, *args: str, **kw: Any) -> str:
        if args[0] == "backup":
            read.append(time.monotonic())
        return real(self, *args, **kw)
    monkeypatch.setattr(backup.Repository, "restic", restic)
    working = threading.Event()
    def busy_wake() -> None:
        with quiesce.working("mira"):
            working.set()
            time.sleep(1.0)  # the wake's length: what the backup has to wait out
            released.append(time.monotonic())
    worker = threading.Thread(target=busy_wake)
    worker.start()
    assert working.wait(30), "mira's wake never took its lock"
    assert backup.take(repo, wait_s=30)["quiescent"]
    worker.join()
    assert read[0] >= released[0]  # it waited for the wake to end
    with quiesce.working("aria"):  # a wake that outlasts --wait
        late = backup.take(repo, wait_s=0.3)
    assert not late["quiescent"] and late["busy"] == ["aria"]
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
    wait_for(lambda: not any(psutil.pid_exists(pid) for pid in killed))
    ids = [s["id"][:8] for s in backup.snapshots(repo)]  # restic 0.14 reports short ids
    assert ids == [first[:8]]  # nothing half-made
    second = backup.take(repo)  # the killed run's lock is stale: removed, not waited on
    assert [s["id"][:8] for s in backup.snapshots(repo)] == [first[:8], second["snapshot"][:8]]
    assert second["files"] > 0
    assert "no errors were found" in backup.verify(repo)


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


def test_a_restore_never_writes_through_a_planted_link(
        civ: Path, repo: backup.Repository, tmp_path: Path) -> None:
    """The attack on `restic restore --target /`: a citizen replaces a directory of its
    home with a link to somewhere it may not write; the restore (root, on a server)
    followed it and wrote the snapshot's files there, with the citizen's ownership."""
    opus = paths.home("opus")
    backup.take(repo)
    victim = tmp_path / "etc"
    victim.mkdir()
    shutil.rmtree(opus.contexts)
    opus.contexts.symlink_to(victim)
    backup.restore(repo, "latest", "opus")
    assert list(victim.iterdir()) == []  # nothing written through the link
    assert opus.contexts.is_dir() and not opus.contexts.is_symlink()
    assert (opus.contexts / "identity.json").is_file()


def test_one_citizens_lock_holds_back_no_other(civ: Path) -> None:
    """One lock per citizen: a daemon (or a citizen's own code) holding its lock, or a
    FIFO planted as a lock, delays no other citizen's work and never hangs a backup."""
    with quiesce.still(["opus"], 0) as busy:  # a backup holding opus
        assert busy == []
        with quiesce.working("mira", wait_s=0.5):  # mira works on at once
            pass
        with quiesce.still(["mira"], 0) as other:
            assert other == []
    fifo = quiesce.lock_path("aria")
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    with quiesce.still(["aria", "mira"], 0.3) as busy:
        assert busy == ["aria"]  # reported, not waited on forever


def test_on_a_server_no_quiescent_lock_is_made_and_no_link_followed(
        civ: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """On a server onboarding makes each citizen's lock: a daemon or root's backup
    that finds none creates none (root would own it, and the citizen could not take
    it), and one that finds a link there neither follows nor waits on it."""
    monkeypatch.setattr(quiesce, "server_mode", lambda _shared: True)
    quiesce.lock_dir().mkdir(parents=True, exist_ok=True)
    with quiesce.working("opus", wait_s=0.5):  # works anyway, saying so
        pass
    with quiesce.still(["opus", "mira"], 0.3) as busy:
        assert busy == ["opus", "mira"]
    assert list(quiesce.lock_dir().iterdir()) == []  # nothing was created
    target = tmp_path / "elsewhere"
    quiesce.lock_path("aria").symlink_to(target)
    with quiesce.still(["aria"], 0.3) as busy:
        assert busy == ["aria"]
    with quiesce.working("aria", wait_s=0.5):
        pass
    assert not target.exists()  # neither side created anything through the link
    made = quiesce.lock_path("mira")
    made.touch(mode=0o600)  # what onboarding made
    with quiesce.still(["mira"], 0) as busy:
        assert busy == []
