"""The wakes page's facts: a citizen's timeline (filters, paging) and one wake's transcript,
each event with the line `citizen logs NAME --wake N` prints for it
(`citizen.home.transcript.line`) and its fields in full for the page."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from citizen.config import paths
from citizen.errors import CitizenError
from citizen.home import transcript, wakelog
from citizen.home.wakelog import WakeLog

PER_PAGE = 50


class NoSuchWake(CitizenError, LookupError):
    """The wake asked for has no log (never run, or swept by retention)."""


def timeline(name: str, wake_type: str | None = None, status: str | None = None,
             page: int = 1, per_page: int = PER_PAGE) -> dict[str, Any]:
    """`name`'s wakes, newest first, filtered by type and status, one page of them.
    The type filter reads file names only; the status one reads each log's first and
    last event (as `citizen logs`)."""
    logs = list(reversed(wakelog.wake_logs(paths.home(name))))
    types = sorted({wakelog.name_of(p).partition("-")[2] for p in logs})
    if wake_type:
        logs = [p for p in logs if wakelog.name_of(p).partition("-")[2] == wake_type]
    if status:
        rows = [r for r in map(wakelog.summary, logs) if r["status"] == status]
        total = len(rows)
        pages = max(1, math.ceil(total / per_page))
        page = min(max(page, 1), pages)
        rows = rows[(page - 1) * per_page:page * per_page]
    else:
        total = len(logs)
        pages = max(1, math.ceil(total / per_page))
        page = min(max(page, 1), pages)
        rows = [wakelog.summary(p) for p in logs[(page - 1) * per_page:page * per_page]]
    for r in rows:
        del r["path"]  # where the file is on disk is no business of the page
    return {"citizen": name, "rows": rows, "types": types, "type": wake_type or "",
            "status": status or "", "page": page, "pages": pages, "total": total}


def log_path(name: str, number: int) -> Path:
    """The log of wake `number` (or of an `ask`/`doctor` call numbered so), as `citizen logs`.

    :raises NoSuchWake: there is none.
    """
    home = paths.home(name)
    match = [p for p in wakelog.wake_logs(home, calls=True) if p.name.startswith(f"{number:06d}-")]
    if not match:
        raise NoSuchWake(f"no wake {number} of {name} - its timeline is at /wakes/{name}")
    return match[0]


def transcript_of(name: str, number: int) -> dict[str, Any]:
    """Wake `number` of `name`: its summary row, every event (see `event`), and, while
    the wake has not ended, `live` with the byte `offset` its tail goes on from (`tail`)."""
    path = log_path(name, number)
    home = paths.home(name)
    if path.name.endswith(".gz"):  # compressed by retention: long ended
        raw, offset = wakelog.read(path), 0
    else:
        raw, offset = _whole_lines(path)
    # The summary after the events: an end written in between shows in it, and the tail
    # from `offset` then reads that end too.
    summary = wakelog.summary(path)
    del summary["path"]
    live = not path.name.endswith(".gz") and not any(_ended(e) for e in raw)
    return {"citizen": name, "summary": summary, "live": live, "offset": offset,
            "events": [event(e, home) for e in raw]}


def tail(name: str, path: Path, offset: int, first: bool = False) -> dict[str, Any]:
    """The events of `name`'s wake log `path` (`log_path`) written since byte `offset`
    (whole lines only, `wakelog.read_new`: the log is never re-read, and a log that has
    not grown costs one stat), the offset to go on from, and whether the wake has ended -
    then with its summary row. `first`: the tail's first read, which also looks at the
    log's last event (a tail reconnecting after the end finds no new event)."""
    raw, offset = wakelog.read_new(path, offset)
    gone = not path.exists()  # swept or compressed while watched: nothing more is written
    ended = gone or any(_ended(e) for e in raw) or (
        first and not raw and _ended(wakelog.first_and_last(path)[1]))
    out: dict[str, Any] = {"events": [event(e, paths.home(name)) for e in raw],
                           "offset": offset, "ended": ended, "summary": None}
    if ended and not gone:
        out["summary"] = {k: v for k, v in wakelog.summary(path).items() if k != "path"}
    return out


def block(name: str, number: int, key: str) -> str:
    """The text of system block `key` of wake `number` of `name` - only a key a prompt
    event of that wake names: a key in a URL is data, never a path to read.

    :raises NoSuchWake: no such wake, no prompt of it names `key`, or the block is gone.
    """
    path = log_path(name, number)
    named = {str(k) for e in wakelog.read(path) if e.get("event") == "prompt"
             for k in e.get("system_blobs") or []}
    if key not in named:
        raise NoSuchWake(f"wake {number} of {name} has no block {key!r} - its blocks are "
                         f"listed at /wakes/{name}/{number}")
    try:
        return WakeLog.read_blob(paths.home(name), key)  # checks the key's shape too
    except OSError:
        raise NoSuchWake(f"block {key} of wake {number} of {name} is gone (swept with "
                         f"old logs) or not readable here") from None


def _whole_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every whole event of a plain log and the byte offset after the last one."""
    events: list[dict[str, Any]] = []
    offset = 0
    while True:  # read_new reads at most MAX_EVENT bytes at a time
        new, after = wakelog.read_new(path, offset)
        events += new
        if after == offset:
            return events, offset
        offset = after


def _ended(e: dict[str, Any]) -> bool:
    return e.get("event") == "wake_end"


def event(e: dict[str, Any], home: paths.Home) -> dict[str, Any]:
    """One event for the page: `kind`, the CLI's `line`, and the fields its kind shows."""
    kind = str(e.get("event", "?"))
    out: dict[str, Any] = {"kind": kind, "ts": str(e.get("ts", "")), "line":
                           transcript.line(e)}
    if kind == "llm_call":
        cached = int(e.get("cache_read") or 0)
        fresh = int(e.get("tokens_in") or 0) + int(e.get("cache_write") or 0)
        reply = e.get("reply") or {}
        out.update(
            purpose=e.get("purpose"), model=e.get("model"), route_model=e.get("route_model"),
            tokens_in=e.get("tokens_in"), tokens_out=e.get("tokens_out"), cache_read=cached,
            cached_share=round(cached / (cached + fresh), 3) if cached + fresh else 0.0,
            cost_usd=e.get("cost_usd", 0.0), latency_s=e.get("latency_s"),
            error=e.get("error"), text=(reply.get("text") or "") if isinstance(reply, dict)
            else "", tool_calls=[{"name": c.get("name"), "args": _json(c.get("input"))}
                                 for c in (reply.get("tool_calls") or [])
                                 if isinstance(c, dict)] if isinstance(reply, dict) else [])
    elif kind == "tool_call":
        out.update(tool=e.get("tool"), args=_json(e.get("args")), result=str(e.get("result", "")),
                   result_chars=e.get("result_chars"), error=bool(e.get("error")),
                   cached=bool(e.get("cached")), duration_s=e.get("duration_s"))
    elif kind == "prompt":
        out.update(purpose=e.get("purpose"), tools=list(e.get("tools") or []),
                   blocks=[_block(home, k) for k in e.get("system_blobs") or []])
    elif kind == "contexts":
        out.update(tokens=dict(e.get("tokens") or {}))
    elif kind == "task":
        out.update(id=e.get("id"), transition=e.get("transition"), summary=e.get("summary"))
    elif kind == "gate":
        out.update(verdict=e.get("verdict"), reason=e.get("reason"))
    return out


def _block(home: paths.Home, key: str) -> dict[str, Any]:
    """A system block of a prompt: its key and size (the text is on demand, not inline)."""
    try:
        return {"key": key, "chars": len(WakeLog.read_blob(home, str(key)))}
    except OSError:
        return {"key": key, "chars": None}  # swept with old logs, or not readable here


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True, default=str)
