"""A change's records as files under `shared/changes/<id>/` (a server of its own).

The reader `shared.evolution.Evolution.get` uses when its commons is this server's files:
each record a file of its own, its author the file's owner (checked in server mode,
`shared.records`). `shared.change_rows` is the same reader over the civilization's
database, for several servers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared import baseline as base_records
from shared import records
from shared.change_rows import RUN_NAME, RUNS
from shared.changes import Change, whole_announcement
from shared.errors import NotFound
from shared.layout import Layout


def change(shared_dir: Path, change_id: str, only: str | None, enforce: bool,
           announced: Callable[[str, dict[str, Any] | None], Change]) -> Change:
    """A change and its valid records (`Evolution.get`); `announced` makes the change of
    a whole announcement, its reviewers drawn."""
    base = Layout(shared_dir).changes / change_id
    if not (base / "announce.json").exists():
        raise NotFound(f"no change {change_id} - see code_pending_reviews or "
                       "code_status for the known ones")
    announce = records.read(base / "announce.json", None, enforce,
                            accept=whole_announcement)
    change = announced(change_id, announce)
    for kind in ("reports", "adoptions", "declines"):
        mine = base / kind / f"{only}.json"
        found = ([mine] if mine.is_file() else []) if only and kind != "reports" \
            else sorted((base / kind).glob("*.json"))
        for path in found:
            record = records.read(path, path.stem, enforce, by_name=True)
            if record is not None:
                getattr(change, kind)[path.stem] = record
    # Only the runs the reports cite are read: a flood of run files costs no reader.
    for report in change.reports.values():
        ref = report.get("run")
        if isinstance(ref, str) and RUN_NAME.match(ref) and ref not in change.runs:
            run = records.read(base / RUNS / f"{ref}.json", None, enforce)
            if run is not None:  # its author is its file's owner (server mode)
                change.runs[ref] = run
    # Only the broker's record counts (a merged.json in the change's folder is anyone's).
    change.merged = base_records.read_merged(shared_dir, change_id, enforce)
    return change
