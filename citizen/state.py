"""Counters a citizen keeps across restarts: wake numbers and slot numbers.

Slot = slot number mod 10 picks the scheduled wake type, so the number persists:
a restart continues the rotation instead of starting again at REFLECT. Every wake,
scheduled or rung by the doorbell, gets a unique wake number for its log.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from citizen.paths import Home
from shared.atomic import read_json, write_json

SCHEMA_VERSION = 1


@contextmanager
def _locked(home: Home) -> Iterator[None]:
    # flock, not filelock: it blocks without polling and is released by the kernel
    # when a holder is killed; the daemon and `citizen wake` may allocate at once.
    lock = home.dir / ".state.lock"
    with lock.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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


def mark(home: Home, key: str, value: Any) -> None:
    """Remember one value (e.g. the wake number of the last reflection)."""
    with _locked(home):
        data = load(home)
        data["marks"][key] = value
        write_json(home.state, data)
