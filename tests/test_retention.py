"""Bounded logs: whole for `logs.full_days`, then gzipped, then gone after `logs.keep_days`.

The finding on the old code: every wake wrote its log and blobs (≈400 KB with full
contexts) and nothing ever removed them, so a citizen's disk grew without bound."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest

from citizen.config import paths
from citizen.home import retention, wakelog
from citizen.home.wakelog import WakeLog
from shared import clock

MONDAY = 1767571200.0  # 2026-01-05T00:00:00Z
DAY = 86400.0


def on_day(monkeypatch: pytest.MonkeyPatch, day: float) -> None:
    """World time is `day` days after MONDAY, running at wall speed."""
    monkeypatch.setenv(clock.CLOCK_ENV, f"{MONDAY + day * DAY},{time.time()},1")


def wake(number: int, blob: str, *, ended: bool = True) -> Path:
    """A wake log naming one blob (as a model call names its system blocks)."""
    log = WakeLog(paths.home("opus"), number, "TASK")
    log.event("wake_start", citizen="opus", type="TASK")
    log.event("llm_call", system_blobs=[log.blob(blob)], reply={"text": "x" * 2000})
    if ended:
        log.event("wake_end", status="ok", cost_usd=0.01, calls=1)
    return log.path


def age_blobs(home: paths.Home) -> None:
    """Blobs last touched two hours ago (the sweep spares a blob touched in the last hour)."""
    for blob in (home.dir / "logs" / "blobs").glob("*.txt"):
        os.utime(blob, (time.time() - 7200, time.time() - 7200))


def test_old_logs_are_compressed_then_expired_and_still_read(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = paths.home("opus")
    on_day(monkeypatch, 0)
    ancient = wake(1, "a block only the oldest wake used")
    on_day(monkeypatch, 60)
    older = wake(2, "a block two wakes used")
    on_day(monkeypatch, 95)
    recent = wake(3, "a block two wakes used")
    running = wake(4, "a block of a wake still running", ended=False)
    age_blobs(home)
    before = retention.disk_bytes(home)

    on_day(monkeypatch, 100)
    done = retention.sweep(home, full_days=14, keep_days=90)

    assert (done.expired, done.compressed, done.blobs) == (1, 1, 1)
    assert not ancient.exists()  # past keep_days: gone
    assert not older.exists() and older.with_suffix(".jsonl.gz").exists()  # past full_days
    assert recent.exists() and running.exists()  # inside the window; running: untouched
    # A compressed log reads as the original did: `citizen logs --wake 2`, replays.
    events = wakelog.read(older.with_suffix(".jsonl.gz"))
    assert [e["event"] for e in events] == ["wake_start", "llm_call", "wake_end"]
    assert wakelog.summary(older.with_suffix(".jsonl.gz"))["status"] == "ok"
    assert [wakelog.name_of(p) for p in wakelog.wake_logs(home)] == [
        "000002-TASK", "000003-TASK", "000004-TASK"]
    # The blob only the expired wake named is gone; the others stay (a kept log names them).
    blobs = {p.read_text() for p in (home.dir / "logs" / "blobs").glob("*.txt")}
    assert blobs == {"a block two wakes used", "a block of a wake still running"}
    assert retention.disk_bytes(home) < before - done.freed_bytes // 2


def test_a_blob_a_running_wake_just_used_is_never_swept(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wake that stores a blob which already exists touches it; until it logs the key,
    only that recent touch protects it from a sweep running at the same moment."""
    home = paths.home("opus")
    on_day(monkeypatch, 0)
    wake(1, "shared block")
    age_blobs(home)
    on_day(monkeypatch, 100)
    WakeLog(home, 2, "TASK").blob("shared block")  # stored again, key not logged yet
    done = retention.sweep(home, full_days=14, keep_days=90)
    assert done.expired == 1 and done.blobs == 0
    assert [p.read_text() for p in (home.dir / "logs" / "blobs").glob("*.txt")] == [
        "shared block"]


def test_a_sweep_killed_mid_compression_loses_nothing(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = paths.home("opus")
    on_day(monkeypatch, 0)
    log = wake(1, "block")
    part = log.with_name(log.name + ".gz.part")
    part.write_bytes(b"\x1f\x8b half a gzip")  # what a kill -9 mid-write leaves
    on_day(monkeypatch, 20)
    retention.sweep(home, full_days=14, keep_days=90)
    assert not part.exists() and not log.exists()
    with gzip.open(log.with_suffix(".jsonl.gz"), "rt") as fh:
        assert json.loads(fh.readline())["event"] == "wake_start"


def test_the_daemon_sweeps_with_the_operators_settings_and_status_shows_disk(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from citizen.admin.status import citizen_status
    from citizen.daemon.process import Daemon

    home = paths.home("opus")
    data = json.loads(home.config.read_text())
    data["logs"] = {"full_days": 1, "keep_days": 2}
    home.config.write_text(json.dumps(data))
    on_day(monkeypatch, 0)
    log = wake(1, "block")
    on_day(monkeypatch, 1.5)
    daemon = Daemon("opus")
    daemon._schedule()
    retain = daemon.scheduler.get_job("retention")
    daemon.scheduler.shutdown(wait=False)
    retain.func(*retain.args)
    assert not log.exists() and log.with_suffix(".jsonl.gz").exists()
    assert citizen_status("opus")["disk_mb"] == round(retention.disk_bytes(home) / 2**20, 1)


def test_a_compressed_log_still_replays(civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from citizen.llm.replay import ReplayProvider

    on_day(monkeypatch, 0)
    log = wake(1, "block")
    on_day(monkeypatch, 20)
    retention.sweep(paths.home("opus"), full_days=14, keep_days=90)
    # Named as it was (`citizen wake --replay …jsonl`) or as it is now.
    for name in (log, log.with_suffix(".jsonl.gz")):
        assert ReplayProvider.from_log(name).source.endswith(".jsonl.gz")


def test_damaged_and_dying_logs_neither_crash_nor_linger(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = paths.home("opus")
    on_day(monkeypatch, 0)
    killed = wake(1, "block", ended=False)  # its daemon died with it: no wake_end
    on_day(monkeypatch, 20)
    damaged = wake(2, "block").with_suffix(".jsonl.gz")
    damaged.write_bytes(gzip.compress(b'{"event": "wake_start"}\n' * 50)[:-30])  # cut short
    (home.wake_logs / "000002-TASK.jsonl").unlink()
    both = wake(3, "block")  # a sweep died after writing the .gz, before the unlink
    both.with_suffix(".jsonl.gz").write_bytes(gzip.compress(both.read_bytes()))
    on_day(monkeypatch, 100)
    done = retention.sweep(home, full_days=14, keep_days=90)
    assert not killed.exists() and done.expired >= 1  # dead for long: it ended
    events = wakelog.read(damaged)
    assert events[-1]["event"] == "error" and "damaged" in events[-1]["reason"]
    assert damaged.exists()  # kept, reported - never deleted for being unreadable
    names = [p.name for p in wakelog.wake_logs(home)]
    assert len([n for n in names if n.startswith("000003-")]) <= 1
