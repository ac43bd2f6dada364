"""Counters a citizen keeps across restarts: wake numbers and slot numbers.

Slot = slot number mod 10 picks the scheduled wake type, so the number persists:
a restart continues the rotation instead of starting again at REFLECT. Every wake,
scheduled or rung by the doorbell, gets a unique wake number for its log.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from citizen.config.paths import Home
from shared.atomic import read_json, write_json
from shared.locks import locked

SCHEMA_VERSION = 1


def _locked(home: Home) -> AbstractContextManager[float]:
    # The one lock (a blocking flock, released by the kernel when a holder is killed):
    # the daemon and `citizen wake` may allocate at once. 0600: the citizen's alone.
    return locked(home.state, lock_file=home.dir / ".state.lock", mode=0o600)


def load(home: Home) -> dict[str, Any]:
    """The state, or a fresh one; a corrupt file raises `CorruptFile` and is kept."""
    if not home.state.exists():
        return {"schema_version": SCHEMA_VERSION, "wakes": 0, "slots": 0, "marks": {}}
    data: dict[str, Any] = read_json(home.state, SCHEMA_VERSION)
    return data


def allocate(home: Home, scheduled: bool) -> tuple[int, int | None]:
    """Take the next wake number (and, for a scheduled wake, the next slot number)."""
    with _locked(home):
        data = load(home)
        wake = data["wakes"] + 1
        data["wakes"] = wake
        slot = None
        if scheduled:
            slot = data["slots"]
            data["slots"] = slot + 1
        write_json(home.state, data)
    return wake, slot


def give_back(home: Home, wake: int, slot: int | None) -> None:
    """A wake that never started (stopped while it waited for its permit) returns its
    number, and its slot, when nothing took a later one - so the wake logs have no gap
    for a wake that never was (`citizen logs --wake N` names only wakes that ran)."""
    with _locked(home):
        data = load(home)
        if data["wakes"] != wake:
            return
        data["wakes"] = wake - 1
        if slot is not None and data["slots"] == slot + 1:
            data["slots"] = slot
        write_json(home.state, data)


def mark(home: Home, key: str, value: Any) -> None:
    """Remember one value (e.g. the wake number of the last reflection)."""
    with _locked(home):
        data = load(home)
        data["marks"][key] = value
        write_json(home.state, data)


def ensure(home: Home) -> None:
    """Write the fresh state if there is none yet (so a sandbox can mask the file)."""
    with _locked(home):
        if not home.state.exists():
            write_json(home.state, load(home))
