"""The one record reader: one author key, authorship from the kernel, old records still read."""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared import clock, records
from shared.records import AUTHOR

ME = records.effective_user()
# A real user who is not this process: a record naming it, written here, is a forgery.
OTHER = "nobody" if ME != "nobody" else "root"


def plant(path: Path, record: dict[str, object]) -> Path:
    """A record written by this process, whatever it claims (as a forger would)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def test_a_record_names_its_author_under_the_one_key_and_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "dry" / "dry-1.json"
    written = records.write(tmp_path, path, ME, {"location": "a.py", "citizen": "stale?"})
    on_disk = json.loads(path.read_text())
    assert on_disk[AUTHOR] == ME == written[AUTHOR]
    got = records.read(path, None, enforce=True)
    assert got is not None and got[AUTHOR] == ME and got["location"] == "a.py"
    assert records.read(path, ME, enforce=True) == got
    assert records.read(path, OTHER, enforce=True) is None  # it is not OTHER's record


def test_an_old_record_under_a_legacy_key_is_still_read(tmp_path: Path) -> None:
    old = plant(tmp_path / "goals" / "goal-1.json", {"citizen": ME, "title": "old"})
    got = records.read(old, None, enforce=True)
    assert got is not None and got[AUTHOR] == ME and got["title"] == "old"
    report = plant(tmp_path / "findings" / "20260101T120000-x.json", {"by": ME, "peer": "p"})
    assert (records.read(report, None, True, legacy=("by",)) or {}).get(AUTHOR) == ME
    review = plant(tmp_path / "reviews" / f"{ME}.json", {"decision": "approve"})
    # named by its file
    assert (records.read(review, ME, True, by_name=True) or {}).get(AUTHOR) == ME
    assert records.read(review, None, True, by_name=True) is None  # but it names nobody


def test_a_record_claiming_another_author_is_refused_and_kept(tmp_path: Path) -> None:
    pwd.getpwnam(OTHER)  # the claimed author exists: only the file's owner gives it away
    forged = plant(tmp_path / "dry" / "dry-2.json", {AUTHOR: OTHER, "location": "x"})
    legacy = plant(tmp_path / "dry" / "dry-3.json", {"citizen": OTHER, "location": "y"})
    assert records.read(forged, None, enforce=True) is None
    assert records.read(legacy, None, enforce=True) is None
    assert records.read(forged, OTHER, enforce=True) is None
    assert forged.exists() and legacy.exists()  # kept for inspection
    assert records.read(forged, None, enforce=False) is not None  # dev mode: one user


def test_a_broken_record_is_ignored_and_kept(tmp_path: Path) -> None:
    broken = tmp_path / "x.json"
    broken.write_text('{"author": "')
    assert records.read(broken, None, enforce=False) is None
    assert broken.read_text() == '{"author": "'


def test_added_records_never_collide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    monkeypatch.setattr(clock, "moment", lambda: frozen)  # every record in one instant
    folder = tmp_path / "findings" / "aria"
    made = {records.add(tmp_path, folder, ME, {"n": n}) for n in range(5)}
    assert len(made) == 5 and len(list(folder.glob("*.json"))) == 5
    read = [records.read(p, ME, enforce=True) for p in made]
    assert sorted(r["n"] for r in read if r is not None) == [0, 1, 2, 3, 4]


def test_a_sparse_giant_planted_as_a_record_is_ignored_unread(tmp_path: Path) -> None:
    """A peer makes a record a sparse 3 GB file (no disk used): every reader of that
    store - on a server, the scheduler, for every citizen's gate - ignores it without
    reading it whole, within a 2 GB address space (the scheduler's MemoryMax is 1G)."""
    giant = records.write(tmp_path, tmp_path / "proposals" / "p-1.json", ME, {"title": "x"})
    path = tmp_path / "proposals" / "p-1.json"
    with path.open("r+b") as f:
        f.truncate(3 * 2**30)
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2**31, 2**31))\n"
    done = subprocess.run(
        [sys.executable, "-c", limit + "from pathlib import Path\nfrom shared import records\n"
         f"print(records.read(Path({str(path)!r}), None, enforce=False))"],
        capture_output=True, text=True, timeout=120, check=False)
    assert giant[AUTHOR] == ME
    assert (done.returncode, done.stdout) == (0, "None\n"), done.stderr[-500:]
