"""Hierarchical memory: roll-ups are due only when a period has closed; search finds them."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

from citizen.home.memory import Memory
from shared import clock
from tests.daemons import kill_when_ready


def test_rollups_daily_then_weekly_then_monthly(tmp_path: Path) -> None:
    mem = Memory(tmp_path / "memory")
    mem.init()
    for day in (5, 6, 12):  # 2026-10-05 and -06 are in ISO week 41, -12 in week 42
        mem.record(day, "TASK", f"worked on the library on October {day}",
                   when=datetime(2026, 10, day, 12, tzinfo=UTC))
    calls: list[tuple[str, str]] = []

    def summarize(level: str, key: str, text: str) -> str:
        calls.append((level, key))
        return f"{level} {key}: {len(text)} chars about the library"

    assert mem.pending(today=date(2026, 10, 5)) == []  # the day is not over yet: idle
    written = mem.rollup(summarize, today=date(2026, 11, 20))
    assert ("daily", "2026-10-05") in calls and ("weekly", "2026-W41") in calls
    assert ("monthly", "2026-10") in calls
    assert len(written) == len(calls) == 3 + 2 + 1
    assert mem.pending(today=date(2026, 11, 20)) == []  # nothing twice
    hits = mem.search("library")
    assert {h["kind"] for h in hits} >= {"raw", "daily", "weekly"}


def test_index_is_rebuilt_from_files_when_missing(tmp_path: Path) -> None:
    mem = Memory(tmp_path / "memory")
    mem.init()
    mem.record(1, "TASK", "the lighthouse keeper")
    mem.index_path.unlink()
    assert mem.search("lighthouse")[0]["ref"] == "1"
    assert mem.latest_wake() == 1


# A writer that stops for good once it opens the index: the raw line is on disk, the
# index has not got it yet (where a kill -9 or a crash of the wake can land).
_STOPPED_WRITER = """
import signal, sqlite3, sys
from pathlib import Path
from citizen.home.memory import Memory

def stop(*args, **kwargs):
    Path(sys.argv[1]).touch()
    signal.pause()

sqlite3.connect = stop
Memory(Path(sys.argv[2])).record(2, "TASK", "the second lighthouse")
"""


def test_a_writer_killed_between_the_raw_line_and_the_index_loses_nothing(
        tmp_path: Path) -> None:
    mem = Memory(tmp_path / "memory")
    mem.init()
    mem.record(1, "TASK", "the first lighthouse")
    kill_when_ready(_STOPPED_WRITER, tmp_path / "ready", str(mem.dir))
    assert "second lighthouse" in (mem.dir / "raw").joinpath(
        f"{clock.today().isoformat()}.jsonl").read_text()
    assert {h["ref"] for h in mem.search("lighthouse")} == {"1", "2"}
    mem.record(3, "TASK", "the third lighthouse")  # and it goes on, each entry once
    assert sorted(h["ref"] for h in mem.search("lighthouse")) == ["1", "2", "3"]


def test_an_index_that_does_not_open_is_rebuilt_from_the_files(tmp_path: Path) -> None:
    mem = Memory(tmp_path / "memory")
    mem.init()
    mem.record(1, "TASK", "the lighthouse keeper")
    mem.index_path.write_bytes(b"torn by a power loss" * 300)
    assert [h["ref"] for h in mem.search("lighthouse")] == ["1"]
    mem.record(2, "TASK", "another lighthouse")
    assert sorted(h["ref"] for h in mem.search("lighthouse")) == ["1", "2"]
