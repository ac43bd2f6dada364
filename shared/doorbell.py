"""The doorbell: event files that wake a citizen promptly (`shared/doorbell/<name>/`).

Anyone with a reason - a new task, a vote owed, a debate turn - rings by writing a
small JSON file; the citizen's daemon watches the directory (inotify) and starts an
out-of-slot wake of the requested type. Files are written atomically (a hidden temp
file renamed into place), so a watcher never reads half an event.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from shared import clock
from shared.atomic import write_json


@dataclass(frozen=True)
class Ring:
    """One doorbell event."""

    path: Path
    wake_type: str
    reason: str
    sender: str


def ring(directory: Path, wake_type: str, reason: str, sender: str = "operator",
         owner: tuple[int, int] | None = None) -> Path:
    """Ring a citizen's doorbell (`owner`: hand the file to the citizen when root rings)."""
    name = f"{time.time_ns()}-{os.getpid()}-{wake_type}.json"
    path = directory / name
    # 0660: rung by other citizens (group `citizens`), removed by the owner's daemon.
    write_json(path, {"wake_type": wake_type, "reason": reason, "sender": sender,
                      "ts": clock.now()}, mode=0o660, owner=owner)
    return path


def drain(directory: Path) -> list[Ring]:
    """Take every pending event (oldest first), removing its file. Unreadable ones are skipped."""
    rings: list[Ring] = []
    if not directory.is_dir():
        return rings
    for path in sorted(p for p in directory.iterdir() if not p.name.startswith(".")):
        try:
            data = json.loads(path.read_bytes())
            rings.append(Ring(path, str(data["wake_type"]), str(data.get("reason", "")),
                              str(data.get("sender", "?"))))
        except (OSError, ValueError, KeyError, TypeError):
            bad = path.with_name("." + path.name + ".unreadable")
            path.replace(bad)  # kept for inspection, out of the watcher's way
            continue
        path.unlink(missing_ok=True)
    return rings
