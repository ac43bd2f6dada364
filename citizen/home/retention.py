"""Bounded logs: a wake's log is kept whole, then compressed, then expired.

A wake writes its JSONL log and its blobs (≈400 KB a wake with full contexts); nothing
used to remove them, so a citizen's disk grew without bound. Now, by world time
(`shared.clock`): a log whose wake ended more than `logs.full_days` ago is gzipped in
place (`…jsonl.gz`, which `wakelog.read` reads like the original, so `citizen logs` and
replays inside the window keep working); past `logs.keep_days` it is deleted. A blob is
deleted, when a log expires, if no kept log names it and nothing touched it in the last
hour (a running wake touches the blobs it refers to, so one it is about to log is never
swept).

The spend ledgers (the bill), tasks, memory and contexts are not logs: they stay.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import os
import re
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from citizen.config import LogSettings
from citizen.config.paths import Home
from citizen.home import quiesce, wakelog
from shared import clock

log = logging.getLogger(__name__)
DAY_S = 86400.0
BLOB_GRACE_S = 3600.0  # wall seconds: a blob touched this recently may be about to be logged
_KEY = re.compile(rb"\b[0-9a-f]{24}\b")


@dataclass
class Swept:
    compressed: int = 0
    expired: int = 0
    blobs: int = 0
    freed_bytes: int = 0


def disk_bytes(home: Home) -> int:
    """What the citizen's home holds on disk (files only, links not followed)."""
    total, folders = 0, [str(home.dir)]
    while folders:  # os.walk's files and folders, without a Path a file
        with contextlib.suppress(OSError), os.scandir(folders.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):  # gone meanwhile
                    if not entry.is_dir():
                        total += entry.stat(follow_symlinks=False).st_size
                    elif not entry.is_symlink():  # a link to a folder is not walked
                        folders.append(entry.path)
    return total


def daily(name: str, home: Home, logs: LogSettings) -> None:
    """The daemon's daily sweep, between wakes (citizen.home.quiesce); never raises."""
    try:
        with quiesce.working(name):
            done = sweep(home, logs.full_days, logs.keep_days)
    except (OSError, ValueError, EOFError) as exc:  # a full disk, a damaged log: say so
        log.warning("citizen %s: wake-log retention failed: %s", name, exc)
        return
    if done.compressed or done.expired or done.blobs:
        log.info("citizen %s: logs kept bounded: %d compressed, %d expired, %d blobs "
                 "removed, %.1f MB freed", name, done.compressed, done.expired, done.blobs,
                 done.freed_bytes / 2**20)


def sweep(home: Home, full_days: float, keep_days: float) -> Swept:
    """Compress and expire `home`'s wake logs and unreferenced blobs (module doc)."""
    out = Swept()
    now = clock.time()
    for part in home.wake_logs.glob("*.gz.part"):  # a sweep killed mid-compression
        part.unlink()
    kept: list[Path] = []
    for path in wakelog.wake_logs(home, calls=True):
        ended = _ended(path)
        if ended is None:
            kept.append(path)  # running, or torn without an end: never touched
            continue
        age = now - ended
        size = path.stat().st_size
        if age > keep_days * DAY_S:
            path.unlink()
            out.expired += 1
            out.freed_bytes += size
        elif age > full_days * DAY_S and path.suffix == ".jsonl":
            out.freed_bytes += size - _compress(path, ended).stat().st_size
            out.compressed += 1
            kept.append(path.with_suffix(".jsonl.gz"))
        else:
            kept.append(path)
    if out.expired:  # only an expired log lets go of blobs (a compressed one still names them)
        out.blobs, freed = _sweep_blobs(home, kept)
        out.freed_bytes += freed
    return out


def _ended(path: Path) -> float | None:
    """World time the wake ended; None while it may still run (kept untouched)."""
    if path.name.endswith(".gz"):
        return path.stat().st_mtime  # set to the end when compressed: no daily gunzip
    _, end = wakelog.first_and_last(path)
    try:
        at = clock.epoch(end.get("ts"))
    except ValueError:
        return None  # an unreadable time: kept, never guessed
    if end.get("event") == "wake_end":
        return at or None
    # Killed with its daemon before it logged its end: it ended with its last event,
    # once that is older than any wake can run.
    return at if at and clock.time() - at > DAY_S else None


def _compress(path: Path, ended: float) -> Path:
    """`path` gzipped beside itself (written whole, then renamed: a crash leaves either
    the original or both, never a torn .gz), dated when its wake `ended` (world time)."""
    target = path.with_suffix(".jsonl.gz")
    partial = target.with_name(target.name + ".part")
    with path.open("rb") as src, partial.open("wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb") as dst:
            dst.writelines(src)
        raw.flush()
        os.fsync(raw.fileno())  # on disk before the original goes
    os.utime(partial, (ended, ended))
    os.replace(partial, target)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename is durable too
    finally:
        os.close(fd)
    path.unlink()
    return target


def _sweep_blobs(home: Home, kept: list[Path]) -> tuple[int, int]:
    blobs = home.wake_logs.parent / "blobs"
    if not blobs.is_dir():
        return 0, 0
    named: set[str] = set()
    for path in kept:
        opener = gzip.open if path.name.endswith(".gz") else open
        try:
            with opener(path, "rb") as fh:
                named.update(k.decode() for k in _KEY.findall(fh.read()))
        except (OSError, EOFError, zlib.error) as exc:  # a damaged .gz keeps every blob
            log.warning("retention: cannot read %s (%s); no blob is swept", path, exc)
            return 0, 0
    count = freed = 0
    wall = time.time()
    for blob in blobs.glob("*.txt"):
        st = blob.stat()
        if blob.stem not in named and wall - st.st_mtime > BLOB_GRACE_S:
            blob.unlink()
            count += 1
            freed += st.st_size
    return count, freed
