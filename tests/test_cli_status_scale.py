"""Issue 33: `citizen status` and the civilization page for a thousand citizens - what a row
reads, mechanically: the ends of few wake logs, the budget of the config, no walk of a home
a view does not show or root measured lately, the commons' handle once, no protocol at
start. (The timings are bench/cli.py's.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from citizen import civilization
from citizen.admin import disk, status
from citizen.cli import cli
from citizen.config import paths
from citizen.home import retention, wakelog
from citizen.web.facts import civilization as facts
from shared import clock
from shared.atomic import open_plain

NOON = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()
HOUR = 3600.0


def world_noon(monkeypatch: pytest.MonkeyPatch) -> None:
    """World time is noon UTC now and runs at wall speed (no test depends on the hour)."""
    monkeypatch.setenv(clock.CLOCK_ENV, f"{NOON},{time.time()},1")


def log(number: int, started: float, written: float) -> Path:
    """Wake log `number` of opus: started at world time `started`, last written at
    `written` (its mtime, on the wall clock)."""
    path = paths.home("opus").wake_logs / f"{number:06d}-TASK.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"ts": clock.now(started), "event": "wake_start"}) + "\n"
                    + json.dumps({"ts": clock.now(written), "event": "wake_end",
                                  "status": "ok"}) + "\n")
    wall = time.time() - (clock.time() - written)
    os.utime(path, (wall, wall))
    return path


def test_wakes_today_read_from_mtimes_and_few_first_lines(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world_noon(monkeypatch)
    yesterday = [log(n, NOON - 30 * HOUR + n * HOUR, NOON - 30 * HOUR + n * HOUR + 60)
                 for n in range(1, 6)]
    overnight = log(6, NOON - 12.5 * HOUR, NOON - 11.5 * HOUR)  # 23:30 to 00:30
    today = [log(n, NOON - (10 - n) * HOUR, NOON - (10 - n) * HOUR + 60) for n in (7, 8, 9)]
    opened: list[Path] = []

    def spy(path: Path) -> Any:
        opened.append(path)
        return open_plain(path)

    monkeypatch.setattr(wakelog, "open_plain", spy)
    row = status.citizen_status("opus")
    assert row["wakes_today"] == 3  # the overnight wake started yesterday
    assert row["last_wake"]["wake"] == 9
    # Yesterday's logs are never opened; of today's only the first that may have begun
    # yesterday, until one began today - and the last log's ends for the last wake.
    assert not set(opened) & set(yesterday)
    assert set(opened) <= {overnight, today[0], today[-1]}


def test_the_plain_table_walks_no_home_and_wide_does(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[str] = []
    real = retention.disk_bytes

    def walk(home: paths.Home) -> int:
        walked.append(home.name)
        return real(home)

    monkeypatch.setattr(retention, "disk_bytes", walk)
    out = CliRunner().invoke(cli, ["status"])
    assert out.exit_code == 0, out.output
    assert walked == []
    out = CliRunner().invoke(cli, ["status", "--wide"])
    assert out.exit_code == 0, out.output
    assert sorted(walked) == ["aria", "mira", "opus"] and " MB" in out.output


def test_disk_is_roots_last_check_while_fresh_else_walked(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checked = disk.Verdict("opus", 123.4, 2048, "ok", clock.now())
    folder = disk.state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "opus.json").write_text(json.dumps({"schema_version": 1, **asdict(checked)}))
    walked: list[str] = []

    def walk(home: paths.Home) -> int:
        walked.append(home.name)
        return 0

    monkeypatch.setattr(retention, "disk_bytes", walk)
    row = status.citizen_status("opus")
    assert (row["disk_mb"], row["disk_measured_at"]) == (123.4, checked.checked_at)
    assert walked == []
    old = disk.Verdict("opus", 123.4, 2048, "ok",
                       clock.now(clock.time() - status.DISK_FRESH_S - 60))
    (folder / "opus.json").write_text(json.dumps({"schema_version": 1, **asdict(old)}))
    assert status.citizen_status("opus")["disk_mb"] == 0.0 and walked == ["opus"]


def test_status_reads_the_budget_alone_of_a_config(civ: Path) -> None:
    home = paths.home("opus")
    data = json.loads(home.config.read_text())
    data["budget"] = {**data.get("budget", {}), "max_usd_per_day": 7.5}
    home.config.write_text(json.dumps({**data, "focus": ""}))  # invalid: focus is empty
    assert status.citizen_status("opus")["usd_per_day_cap"] == 7.5
    data["budget"]["max_usd_per_day"] = "lots"  # the cap itself invalid: no cap shown
    home.config.write_text(json.dumps(data))
    assert status.citizen_status("opus")["usd_per_day_cap"] is None


def test_the_page_builds_the_commons_once_for_all_rows(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    real = civilization.commons

    def commons(*args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(civilization, "commons", commons)
    assert [r["citizen"] for r in facts.rows()] == ["aria", "mira", "opus"]
    assert len(built) == 1


def test_status_imports_no_protocol_at_start(civ: Path) -> None:
    code = ("import sys\n"
            "from citizen.cli import cli\n"
            "try:\n"
            "    cli(['status'])\n"
            "except SystemExit:\n"
            "    pass\n"
            "print(sorted(m for m in ('shared.consensus', 'shared.debates', 'shared.streams',"
            " 'git') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=paths.project_dir(), env=os.environ).stdout
    assert "opus" in out
    assert out.strip().endswith("[]")


def test_the_group_is_looked_up_once_until_etc_group_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`citizen status` asks whether this is a server twice per citizen; each asked the
    group database (the whole of /etc/group) - 2,000 reads for a thousand citizens."""
    import grp

    from shared import identity

    asked: list[str] = []
    real = grp.getgrnam

    def counting(name: str) -> Any:
        asked.append(name)
        return real(name)

    monkeypatch.setattr(grp, "getgrnam", counting)
    monkeypatch.setattr(identity, "_GID", [])
    for _ in range(100):
        identity.server_mode(tmp_path)
    assert asked == ["citizens"]
