"""Hierarchical memory: roll-ups are due only when a period has closed; search finds them."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

from citizen.home.memory import Memory


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
