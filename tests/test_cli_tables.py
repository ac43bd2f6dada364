"""Issue 31 items 5 and 6: every listing is a table for a terminal - a header row first,
at most 120 columns unless --wide, times as ages, what a citizen wrote cleaned, an empty
listing that says what to do - and every command a hint prints runs as printed."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from citizen import civilization
from citizen.broker import service
from citizen.broker.ledger import Caps, Ledger
from citizen.cli import cli
from citizen.config import paths
from citizen.home import spend
from citizen.home.tasks import TaskQueue
from citizen.wake.types.stream import say
from tests.test_debate_checks import run_out

TITLE = "\x1b]0;pwned\x07"  # retitles the window when printed raw
LONG = " and then some more words to make the line long" * 4


def run(*args: str) -> list[str]:
    out = CliRunner().invoke(cli, list(args))
    assert out.exit_code == 0, out.output
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout, repr(out.stdout)
    return out.stdout.splitlines()


@pytest.fixture
def records(civ: Path) -> Path:
    """A proposal, a run-out debate and a stream whose texts carry an escape sequence; a
    model call in opus's spend ledger and one in the broker's."""
    run("proposal", "start", "--by", "opus", f"Create hi.md {TITLE}{LONG}")
    debates = civilization.debates()
    run_out(debates, debates.start(f"Tabs {TITLE}{LONG}", ["opus", "mira", "aria"],
                                   "operator").id)
    say(f"Who knows locks? {TITLE}{LONG}", to=["mira"])
    spend.record(paths.home("opus"), cost_usd=0.0123, model=f"claude {TITLE}", calls=1,
                 wake_type="TASK", purpose="task", tokens_in=1200, tokens_out=300,
                 cache_read=900, cache_write=100)
    paths.broker_state().mkdir(parents=True, exist_ok=True)
    ledger = Ledger(service.ledger_path())
    ledger.reserve("opus", "claude-opus-4-6", 0.25, Caps(9e9, 9e9, 9e9, 9e9), purpose="task")
    ledger.close()
    return civ


LISTINGS: list[tuple[Sequence[str], str]] = [
    (("cost",), "CITIZEN"), (("cost", "--by", "model"), "MODEL"), (("spend",), "DAY"),
    (("broker", "status"), "WHAT"), (("proposal", "list"), "PROPOSAL"),
    (("debate", "list"), "DEBATE"), (("debate", "graders"), "GRADER"),
    (("stream", "list"), "STREAM"), (("stream", "calibration"), "CITIZEN"),
    (("disk", "check"), "CITIZEN"),
]


@pytest.mark.parametrize(("args", "first"), LISTINGS, ids=[" ".join(a) for a, _ in LISTINGS])
def test_a_listing_is_a_table_with_a_header_within_120_columns(
        records: Path, args: Sequence[str], first: str) -> None:
    lines = run(*args)
    assert lines[0].split()[0] == first and lines[0] == lines[0].upper(), lines
    assert len(lines) >= 2, lines  # a record under the header
    assert all(len(line) <= 120 for line in lines), [len(line) for line in lines]


def test_what_citizens_wrote_is_cleaned_and_shown_in_full_with_wide(records: Path) -> None:
    for args, text in ((("proposal", "list"), "Create hi.md"), (("debate", "list"), "Tabs"),
                       (("stream", "list"), "Who knows locks?"), (("cost", "--by", "model"),
                                                                 "claude")):
        row = next(line for line in run(*args) if text in line)
        assert "pwned" not in row and "]0;" not in row  # the text stays, its sequence goes
    wide = run("debate", "list", "--wide")
    assert max(len(line) for line in wide) > 120
    assert LONG.strip() in wide[1]
    assert run("debate", "list")[1].endswith("…")


def test_times_are_ages_in_the_table_and_iso_in_json(records: Path) -> None:
    for args in (("proposal", "list"), ("debate", "list"), ("stream", "list")):
        assert " s ago" in run(*args)[1] or " min ago" in run(*args)[1]
        (row,) = json.loads("\n".join(run(*args, "--json")))
        stamp = row.get("opened") or row.get("created")
        assert stamp and stamp[:2] == "20" and "T" in stamp, row


@pytest.mark.parametrize(("args", "hint"), [
    (("proposal", "list"), "proposal start --by NAME"),
    (("proposal", "list", "--human"), "proposal list"),
    (("debate", "list"), "debate start --topic"),
    (("debate", "graders"), "debate list"),
    (("stream", "list"), "stream say"),
    (("spend",), "spend --days 30"),
    (("cost",), "cost --days 30"),
])
def test_an_empty_listing_says_what_to_run(civ: Path, args: Sequence[str], hint: str) -> None:
    (line,) = run(*args)
    assert f"`citizen --root {civ} {hint}" in line, line


def test_a_snapshot_listing_is_a_table(civ: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPERIENCE_BACKUP_REPO", str(tmp_path / "repo"))
    (empty,) = run("backup", "list")
    assert f"`citizen --root {civ} backup now`" in empty
    run("backup", "now")
    header, row = run("backup", "list")
    assert header.split() == ["SNAPSHOT", "TAKEN", "PATHS", "TAGS"]
    assert " s ago" in row and len(row) <= 120


def test_status_counts_held_failed_and_cancelled_tasks(civ: Path) -> None:
    tasks = TaskQueue(paths.home("opus").tasks)
    tasks.add("queued one")
    for state in ("failed", "cancelled"):
        tasks.finish(tasks.claim(tasks.add(f"{state} one").id), state, "x")
    (row,) = [line for line in run("status") if line.startswith("opus")]
    assert "1 queued 1f 1c" in row and len(row) <= 120


def test_hints_run_as_printed(civ: Path) -> None:
    out = run("debate", "start", "--topic", "Tabs", "--with", "opus,mira")
    assert f"Follow it: `citizen --root {civ} debate follow debate-" in out[-1]
    old = CliRunner().invoke(cli, ["debates"])
    assert f"is now `citizen --root {civ} debate list`" in old.stderr
    assert os.environ["CIV_ROOT"] == str(civ)


def test_a_full_disk_names_a_command_that_runs_as_printed(civ: Path) -> None:
    from citizen.cli.errors import one_line

    full = OSError(28, "No space left on device", str(civ / "opus" / "x"))
    assert f"(`citizen --root {civ} disk check` shows" in one_line(full, ["status"])
