"""Wake logs: one JSONL file per wake, every event of that wake, in order.

Complete enough to replay: the first model call records the system blocks and
tool schemas; every call records the messages added since the previous one, the
request digest and the full reply. Past `logs.full_days` a log is gzipped in place
(`citizen.home.retention`); everything here reads both forms.

Root's `citizen logs` and `status` and the web user read these logs, which the citizen
writes: every read here goes through shared/door.py - a plain file only (a FIFO or a
link is no log), at most MAX_LOG bytes, a .gz at most MAX_LOG once inflated (a bomb of a
few MB inflates to gigabytes) - and says what it could not read instead of raising.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from citizen.config.paths import Home
from citizen.home.tasks import now_iso
from shared import door
from shared.atomic import Appender, append_line, fsync_dir, write_bytes
from shared.door import open_plain

MAX_EVENT = 16 * 2**20  # --follow reads at most this much a poll; a longer line is skipped
# A wake's whole log, read or inflated: its events are capped (MAX_EVENT, tool results,
# blobs beside it), so a log past this is planted - a sparse file, a gzip bomb.
MAX_LOG = 64 * 2**20
MAX_BLOB = 16 * 2**20  # a system block (the contexts, capped) is far smaller
MAX_GZ = MAX_LOG // 4  # a compressed log: JSON compresses 5-10x, so MAX_LOG fits in this


class WakeLog:
    """Appends the events of one wake to `logs/wakes/<number>-<TYPE>.jsonl`."""

    def __init__(self, home: Home, number: int, wake_type: str) -> None:
        self.path = home.wake_logs / f"{number:06d}-{wake_type}.jsonl"
        self.number = number
        self.wake_type = wake_type
        self.started = time.monotonic()
        # Set once the wake knows its secrets (`Secrets.redactor`): every string logged
        # passes through it; `str` (none known) leaves the events as they are.
        self.redact: Callable[[str], str] = str
        self.new_blobs = False  # whether `close` owes the blobs' directory an fsync
        # The log's file, open from the first event to `close`: one open a wake, not one
        # an event (each line still written, locked, as it happens: a kill loses none).
        self._out: Appender | None = None
        self._closed = False

    def event(self, event: str, **fields: Any) -> None:
        record = {"ts": now_iso(), "wake": self.number, "event": event, **fields}
        if self.redact is not str:  # `str`: no secret known, nothing to replace
            record = _scrub(record, self.redact)
        if self._closed:  # a line after the close (none in a wake): appended on its own
            append_line(self.path, record)
            return
        if self._out is None:
            self._out = Appender(self.path)
        self._out.append(record)

    def blob(self, text: str) -> str:
        """Store a large text once under `logs/blobs/` (content-addressed); return its key.

        System blocks (the contexts) repeat from wake to wake: storing each distinct
        block once keeps logs small and still lets a replay rebuild every prompt.
        """
        text = self.redact(text)
        key = hashlib.sha256(text.encode()).hexdigest()[:24]
        path = self.blobs / f"{key}.txt"
        try:
            os.utime(path)  # in use again: the retention sweep leaves recent blobs alone
        except FileNotFoundError:
            # Its data is fsynced before the name appears (a name never points at a torn
            # blob, which every later wake would reuse); the names' durability waits for
            # `close`, one directory fsync for all of them (a name lost to a power loss
            # before then reads as a swept blob, and the next wake that needs it writes it).
            write_bytes(path, text.encode(), sync_dir=False)
            self.new_blobs = True
        return key

    @property
    def blobs(self) -> Path:
        return self.path.parent.parent / "blobs"

    @staticmethod
    def read_blob(home: Home, key: str) -> str:
        """The text stored under `key` in `home`'s blobs.

        :raises OSError: it is gone (swept with its wake logs) or not readable here.
        """
        if not re.fullmatch(r"[0-9a-f]{24}", key):
            raise FileNotFoundError(f"{key!r} is not a blob key")
        # Not through a link, not from a FIFO, not a sparse giant: the citizen wrote it.
        raw = door.read_capped(home.wake_logs.parent / "blobs" / f"{key}.txt", MAX_BLOB)
        return raw.decode("utf-8", "replace")

    def close(self) -> None:
        """Make the log durable (called once, at the end of the wake), and every blob it
        names before it: the events are appended without fsync, one fsync here for them
        all (a power loss mid-wake loses the last lines, never the lines' order)."""
        if self.new_blobs:
            fsync_dir(self.blobs)  # the names of this wake's new blobs, before the log's
            self.new_blobs = False
        self._closed = True
        out, self._out = self._out, None
        if out is not None:
            try:
                out.sync()  # the wake's events, appended without fsync
            finally:
                out.close()
        elif self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)  # the wake's events, appended without fsync
            finally:
                os.close(fd)

    def __del__(self) -> None:
        if self._out is not None:  # a log its wake never closed: its descriptor, not its data
            self._out.close()


def _scrub(value: Any, redact: Callable[[str], str]) -> Any:
    """`value` with `redact` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {_scrub(k, redact): _scrub(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v, redact) for v in value]
    return value


# Model calls an operator's command makes outside any wake (`citizen ask`, `citizen doctor`,
# `citizen memory rollup`):
# logged and metered like a wake (`citizen.wake.flow.call_outside_wake`), numbered among
# the wakes, but no wake - not in the wake table, the counts or the last wake.
NOT_WAKES = frozenset({"ASK", "DOCTOR", "ROLLUP"})
_NAME = re.compile(r"\d+-[^.]+\.jsonl(\.gz)?")  # 000123-TASK.jsonl (WakeLog.path)


def wake_logs(home: Home, calls: bool = False) -> list[Path]:
    """A citizen's wake logs (whole or compressed), oldest first; with `calls`, also the
    logs of calls outside a wake (NOT_WAKES: retention sweeps them like the others)."""
    # A link at logs/ or logs/wakes would lead root's `citizen logs` to files elsewhere.
    if home.wake_logs.parent.is_symlink() or home.wake_logs.is_symlink() \
            or not home.wake_logs.is_dir():
        return []
    # Only names a wake log has: a file the citizen named otherwise is no wake (and must
    # not stop `citizen status` or `logs` for every citizen). One listing, names only:
    # `citizen status` lists the logs of every citizen.
    with os.scandir(home.wake_logs) as entries:
        listed = [e.name for e in entries if _NAME.fullmatch(e.name)]
    # Both forms only after a sweep died between writing the .gz and removing the
    # original: the original is complete, and the next sweep redoes the .gz.
    whole = {n for n in listed if not n.endswith(".gz")}
    found = [n for n in listed if n in whole or n.removesuffix(".gz") not in whole]
    if not calls:  # by the name alone: a stat-free filter over hundreds of logs
        found = [n for n in found if n.split(".", 1)[0].partition("-")[2] not in NOT_WAKES]
    folder = home.wake_logs
    return [folder / n for n in sorted(found)]


def name_of(path: Path) -> str:
    """`000123-TASK` for `…/000123-TASK.jsonl` or `…/000123-TASK.jsonl.gz`."""
    return path.name.removesuffix(".gz").removesuffix(".jsonl")


def read(path: Path, cap: int = MAX_LOG, max_events: int | None = None
         ) -> list[dict[str, Any]]:
    """The events of a wake log (at most `max_events`); a torn last line (crash
    mid-write) is skipped. A log that is not a plain file, is bigger than `cap` (or
    inflates past it), or is a damaged .gz gives what could be read and an `error`
    event saying why - never a crash, a hang or a reader's memory filled.

    :raises FileNotFoundError: it is gone (swept meanwhile).
    """
    if path.name.endswith(".gz"):
        out = io.BytesIO()
        try:
            for chunk in _inflated(path, cap):
                out.write(chunk)
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as exc:  # not plain, a bomb, cut short: what was read
            out.seek(0)
            return [*_events(out, max_events), _said(exc)]
        out.seek(0)
        return _events(out, max_events)
    try:
        raw = door.read_capped(path, cap)
    except FileNotFoundError:
        raise
    except OSError as exc:  # not plain, too big: said, not raised
        return [_said(exc)]
    return _events(io.BytesIO(raw), max_events)


def _said(exc: Exception) -> dict[str, Any]:
    """The event a log that could not be read is shown as (`transcript.line` prints
    `error`, a wake's summary row `reason`)."""
    why = f"damaged or unreadable log: {exc}"
    return {"event": "error", "error": why, "reason": why}


def _events(lines: Iterable[bytes], max_events: int | None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for line in lines:
        if max_events is not None and len(events) >= max_events:
            why = (f"more than {max_events} events: the rest are not shown here - "
                   "`citizen logs` prints them all")
            events.append({"event": "error", "error": why, "reason": why})
            break
        event = _parse(line)
        if event:
            events.append(event)
    return events


def read_new(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The whole events appended to a growing (uncompressed) wake log since byte `offset`,
    and the offset to read from next. A last line still being written (no newline yet)
    is left for the next read; a size that has not grown costs one stat, no read. At most
    MAX_EVENT bytes are read: a line longer than that (no event is) is skipped."""
    try:
        if path.stat().st_size <= offset:
            return [], offset
        with open_plain(path) as fh:
            fh.seek(offset)
            data = fh.read(MAX_EVENT)
    except OSError:  # compressed or swept since it was listed, or no plain file: nothing
        return [], offset
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) == MAX_EVENT:  # why: re-reading it each poll would never end
        return [], offset + len(data)
    return [e for e in (_parse(r) for r in data[:end].splitlines()) if e], offset + end


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        value = door.loads(raw)  # nesting capped: a line of 100,000 `[` is no event
    except ValueError:  # JSONDecodeError and UnicodeDecodeError included
        return {}
    return value if isinstance(value, dict) else {}


def first_and_last(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A log's first and last whole events (only its ends are read, when not compressed)."""
    if path.name.endswith(".gz"):
        try:
            first_raw, tail_raw = _gz_ends(path)
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as exc:  # not plain, a bomb, not gzip: said
            said = _said(exc)
            return said, said
        last = next((p for p in (_parse(r) for r in reversed(tail_raw.splitlines())) if p), {})
        return _parse(first_raw), last
    try:
        fh = open_plain(path)
    except FileNotFoundError:
        raise
    except OSError as exc:  # no plain file (a link, a FIFO): no events, and why
        said = _said(exc)
        return said, said
    with fh:
        first_raw = fh.readline(MAX_EVENT)  # why: a first line without end is no event
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 65536))
        tail = fh.read().splitlines()
    last = next((p for p in (_parse(r) for r in reversed(tail)) if p), {})
    return _parse(first_raw), last


def _inflated(path: Path, cap: int = MAX_LOG) -> Iterator[bytes]:
    """A compressed log inflated a MiB at a time: at most MAX_GZ bytes of it read, at most
    `cap` out (a bomb of a few MB inflates to gigabytes).

    :raises TooBig: past either cap. :raises ValueError: not gzip, or cut short.
    """
    data = door.read_capped(path, MAX_GZ)  # the compressed bytes, capped
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # 16+: the gzip header and trailer
    total = 0
    while True:
        try:
            chunk = inflate.decompress(data, 2**20)  # a MiB at most at a time
        except zlib.error as exc:
            raise ValueError(f"{path} is not a gzip stream ({exc})") from exc
        data = inflate.unconsumed_tail
        if not chunk and not data:
            if not inflate.eof:
                raise ValueError(f"{path} ends before its gzip stream does (cut short)")
            return
        total += len(chunk)
        if total > cap:
            raise door.TooBig(errno.EFBIG, f"{path} inflates past {cap} bytes - not read")
        yield chunk


def _gz_ends(path: Path) -> tuple[bytes, bytes]:
    """A compressed log's first line and last 64 KiB: `citizen status` and the dashboard
    want a wake's ends, and holding a whole inflated log (or a bomb's MAX_LOG) for that
    would be each reader's memory.

    :raises TooBig: it inflates past MAX_LOG. :raises ValueError: not gzip, cut short.
    """
    first: bytes | None = None
    head = tail = b""
    for chunk in _inflated(path):
        if first is None:
            head += chunk
            if b"\n" in head or len(head) > MAX_EVENT:  # why: a first line without end is none
                first = head[:head.index(b"\n") + 1] if b"\n" in head else b""
                head = b""
        tail = (tail + chunk)[-65536:]
    return (first if first is not None else head), tail


def first_event(path: Path) -> dict[str, Any]:
    """A log's first whole event, only its first line read when not compressed ({}: none,
    or the log is gone or unreadable) - when the wake started, without the rest."""
    try:
        if path.name.endswith(".gz"):
            return _parse(_gz_ends(path)[0])
        with open_plain(path) as fh:
            return _parse(fh.readline(MAX_EVENT))  # why: a first line without end is no event
    except (OSError, ValueError):  # not plain, a bomb, not gzip: no first event
        return {}


def summary(path: Path) -> dict[str, Any]:
    """One row per wake, from its first and last events only (cheap for big logs)."""
    first, last = first_and_last(path)
    number, _, wake_type = name_of(path).partition("-")
    ended = last.get("event") == "wake_end"
    unreadable = first.get("event") == "error"  # not a log we could read: never "running"
    return {
        "wake": int(number), "type": wake_type, "started": first.get("ts", ""),
        "reason": first.get("reason", ""),
        "status": "unreadable" if unreadable else last.get("status", "") if ended
        else "running",
        "why": last.get("reason", "") if ended else "",
        "cost_usd": last.get("cost_usd", 0.0) if ended else 0.0,
        "calls": last.get("calls", 0) if ended else 0,
        "duration_s": last.get("duration_s", 0.0) if ended else 0.0,
        "path": str(path),
    }
