"""The broker's draw of a change's reviewers (issue 43): who is asked to test it, in order.

When a change is announced, the broker - which no citizen steers - draws a random seed
(after the commit is fixed, so no author can grind its commit hash until the order
favours its friends), ranks the author's peers by their recent review load and their
focus against the files changed (`shared.change_rules.rank`), and files the order with
the operator's k in `shared/draws/<change id>.json`, a directory only its user writes
(as `shared/merged/`). Every reader then derives the same reviewers from that record and
the reports (`shared.change_rules.assigned`); a record not written by the broker's user
is ignored on a server. A draw is never redrawn: the first one stands.

On several servers (`remote`, `shared.remote`) the draw is the record `draws/<change
id>.json` a broker creates in the civilization's database (its author the citizen whose
request it answered); every server's citizens read the first one written there.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from shared import clock
from shared.atomic import CorruptFile, make_dirs, read_json, write_json
from shared.baseline import MERGER
from shared.errors import NotAllowed
from shared.identity import ForgedRecord, check_author
from shared.layout import Layout
from shared.remote import Remote, Taken

RECORD_MODE = 0o644  # everyone reads the draw; only the broker's user writes it
DRAWER = MERGER  # the broker's user: the one whose draws count on a server
MAX_DRAW = 1 << 20  # bytes: a thousand names and a seed fit in 30 KB


def path(shared_dir: Path, change_id: str) -> Path:
    return Layout(shared_dir).draws / f"{change_id}.json"


def key(change_id: str) -> str:
    """The draw's key in the civilization's database (its name under the commons)."""
    return f"draws/{change_id}.json"


def read(shared_dir: Path, change_id: str, enforce: bool,
         remote: Remote | None = None) -> dict[str, Any] | None:
    """The broker's draw for `change_id`, if there is a whole one its user wrote."""
    if remote is not None:
        row = remote.read(key(change_id))
        record = row.get("data") if row is not None else None
        return dict(record) if whole(record) and isinstance(record, dict) else None
    where = path(shared_dir, change_id)
    try:
        check_author(where, DRAWER, enforce)
        record = read_json(where, cap=MAX_DRAW, beneath=shared_dir)
    except (ForgedRecord, CorruptFile, OSError):  # none yet, or a FIFO, link, folder
        return None
    return record if whole(record) else None


def whole(record: object) -> bool:
    """A draw its readers can use: an order of names, a k, a date."""
    if not isinstance(record, dict):
        return False
    order, k = record.get("order"), record.get("k")
    try:
        clock.epoch(str(record.get("drawn")))
    except ValueError:
        return False
    return (isinstance(order, list) and all(isinstance(n, str) for n in order)
            and isinstance(k, int) and not isinstance(k, bool) and k >= 1)


def write(shared_dir: Path, change_id: str, record: dict[str, Any],
          remote: Remote | None = None) -> dict[str, Any]:
    """File the broker's draw, unless one is already filed (returned then: the first
    draw stands - drawing again until an order suits would be the grinding it prevents).

    :raises NotAllowed: something else than a draw sits at its name.
    """
    if remote is not None:
        # The first draw written stands (`read` takes it): two servers' brokers drawing
        # at once, each in its asker's name, both learn the same one.
        with contextlib.suppress(Taken):
            remote.create(key(change_id), record)
        existing = read(shared_dir, change_id, True, remote)
        if existing is None:
            raise NotAllowed(f"{key(change_id)} is not a draw; the operator removes it "
                             "and the author announces again")
        return existing
    folder = Layout(shared_dir).draws
    # 0755: the broker's user writes here, everyone reads (made by setup on a server).
    make_dirs(folder, shared_dir, 0o755)
    with contextlib.suppress(FileNotFoundError):
        existing = read_json(path(shared_dir, change_id), cap=MAX_DRAW, beneath=shared_dir)
        if whole(existing):
            return dict(existing)
        raise NotAllowed(f"{path(shared_dir, change_id)} is not a draw; the operator "
                         "removes it and the author announces again")
    write_json(path(shared_dir, change_id), record, mode=RECORD_MODE, beneath=shared_dir)
    return record


def recent(shared_dir: Path, window_s: float, enforce: bool,
           remote: Remote | None = None) -> list[dict[str, Any]]:
    """The draws filed in the last `window_s` world seconds, for the review load a new
    draw weighs. Only files changed within that window are opened (the broker's own
    files, whose times it alone sets): the cost follows the recent work, not the history."""
    folder = Layout(shared_dir).draws
    since, wall_since = clock.time() - window_s, time.time() - clock.wall_seconds(window_s)
    out = []
    if remote is not None:  # one listing (at most the broker's LIST_MAX of them)
        for row in remote.records("draws"):
            record = row.get("data")
            if whole(record) and isinstance(record, dict) \
                    and clock.epoch(str(record["drawn"])) >= since:
                out.append(dict(record))
        return out
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in sorted(folder.iterdir()):
            try:
                if entry.suffix != ".json" or entry.lstat().st_mtime < wall_since:
                    continue
            except OSError:
                continue
            record = read(shared_dir, entry.stem, enforce)
            if record is not None and clock.epoch(str(record["drawn"])) >= since:
                out.append(record)
    return out
