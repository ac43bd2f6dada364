"""Wake logs: one JSONL file per wake, every event of that wake, in order.

Complete enough to replay: the first model call records the system blocks and
tool schemas; every call records the messages added since the previous one, the
request digest and the full reply.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from citizen.paths import Home
from citizen.tasks import now_iso
from shared.atomic import append_line, read_jsonl, write_bytes


class WakeLog:
    """Appends the events of one wake to `logs/wakes/<number>-<TYPE>.jsonl`."""

    def __init__(self, home: Home, number: int, wake_type: str) -> None:
        self.path = home.wake_logs / f"{number:06d}-{wake_type}.jsonl"
        self.number = number
        self.wake_type = wake_type
        self.started = time.monotonic()
        # Set once the wake knows its secrets: every string logged passes through it.
        self.redact: Callable[[str], str] = str

    def event(self, event: str, **fields: Any) -> None:
        record = {"ts": now_iso(), "wake": self.number, "event": event, **fields}
        append_line(self.path, _scrub(record, self.redact))

    def blob(self, text: str) -> str:
        """Store a large text once under `logs/blobs/` (content-addressed); return its key.

        System blocks (the contexts) repeat from wake to wake: storing each distinct
        block once keeps logs small and still lets a replay rebuild every prompt.
        """
        text = self.redact(text)
        key = hashlib.sha256(text.encode()).hexdigest()[:24]
        path = self.path.parent.parent / "blobs" / f"{key}.txt"
        if not path.exists():
            write_bytes(path, text.encode())
        return key

    def close(self) -> None:
        """Make the log durable (called once, at the end of the wake)."""
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _scrub(value: Any, redact: Callable[[str], str]) -> Any:
    """`value` with `redact` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {_scrub(k, redact): _scrub(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v, redact) for v in value]
    return value


def wake_logs(home: Home) -> list[Path]:
    """A citizen's wake logs, oldest first."""
    return sorted(home.wake_logs.glob("*.jsonl")) if home.wake_logs.is_dir() else []


def read(path: Path) -> list[dict[str, Any]]:
    """The events of a wake log; a torn last line (crash mid-write) is skipped."""
    return [e for e in read_jsonl(path) if isinstance(e, dict)]


def _first_and_last(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    with path.open("rb") as fh:
        first_raw = fh.readline()
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 65536))
        tail = fh.read().splitlines()
    def parse(raw: bytes) -> dict[str, Any]:
        try:
            value = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return {}
        return value if isinstance(value, dict) else {}
    last = next((p for p in (parse(r) for r in reversed(tail)) if p), {})
    return parse(first_raw), last


def summary(path: Path) -> dict[str, Any]:
    """One row per wake, from its first and last events only (cheap for big logs)."""
    first, last = _first_and_last(path)
    number, _, wake_type = path.stem.partition("-")
    ended = last.get("event") == "wake_end"
    return {
        "wake": int(number), "type": wake_type, "started": first.get("ts", ""),
        "reason": first.get("reason", ""),
        "status": last.get("status", "") if ended else "running",
        "why": last.get("reason", "") if ended else "",
        "cost_usd": last.get("cost_usd", 0.0) if ended else 0.0,
        "calls": last.get("calls", 0) if ended else 0,
        "duration_s": last.get("duration_s", 0.0) if ended else 0.0,
        "path": str(path),
    }
