"""Records in the commons: one file per record, its Unix owner its author.

The pattern every protocol here follows (changes, reviews, findings, DRY
violations, goals): a record is never edited by anyone but its author, a change of
state is a new record, and the state of a thing is derived from its records when
read - never stored twice, so it cannot drift.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from shared import atomic
from shared.atomic import CorruptFile, create_json, read_json, write_json
from shared.identity import ForgedRecord, check_author

# The modes and ids of the one record mechanism: these records are shared.threads'
# records without a thread (re-exported for the modules that write them).
from shared.threads import DIR_MODE, RECORD_MODE, beside, besides, effective_user, new_id

__all__ = ["DIR_MODE", "RECORD_MODE", "create", "make_dirs", "new_id", "read", "read_claimed",
           "write"]
log = logging.getLogger(__name__)



def make_dirs(path: Path, top: Path) -> None:
    """Create `path` and any missing parents up to `top`, each with DIR_MODE."""
    atomic.make_dirs(path, top, DIR_MODE)


def _mine(path: Path) -> Path:
    """Where this process writes the record `path`: `path` itself, unless someone else
    created it first (in a sticky directory nobody can replace another's file). Then
    beside it, under a name nobody could guess in advance (`<name>~<user>-<random>`),
    or the one this process made there before; readers take the file its author owns."""
    try:
        owner = path.lstat().st_uid
    except FileNotFoundError:
        return path
    me = os.geteuid()
    if me in (owner, 0):
        return path
    for alt in besides(path):
        if alt.lstat().st_uid == me:
            return alt
    alt = beside(path, effective_user())
    log.warning("%s was pre-created by uid %d; writing %s instead", path, owner, alt.name)
    return alt


def _candidates(path: Path, enforce: bool) -> list[Path]:
    return ([path] if path.is_file() else []) + (besides(path) if enforce else [])


def write(top: Path, path: Path, record: dict[str, Any]) -> None:
    """Write one record (its directories made group-addable and sticky)."""
    make_dirs(path.parent, top)
    write_json(_mine(path), record, mode=RECORD_MODE)


def create(top: Path, path: Path, record: dict[str, Any]) -> None:
    """Write one record that may exist only once (a vote): FileExistsError if it does."""
    make_dirs(path.parent, top)
    create_json(path, record, mode=RECORD_MODE)


def read_claimed(path: Path, enforce: bool, key: str = "citizen") -> dict[str, Any] | None:
    """A record that names its own author under `key`, if that author owns its file
    (the first such among `path` and what was written beside a forgery of it)."""
    for candidate in _candidates(path, enforce):
        try:
            data: dict[str, Any] = read_json(candidate)
            check_author(candidate, str(data.get(key, "")), enforce)
        except (ForgedRecord, CorruptFile) as exc:
            log.warning("ignoring %s: %s", candidate, exc)
            continue
        return data
    return None


def read(path: Path, author: str, enforce: bool) -> dict[str, Any] | None:
    """A record if it is whole and its file belongs to `author` (`path`, or what the
    author wrote beside a forgery of it); None (logged) otherwise."""
    for candidate in _candidates(path, enforce):
        try:
            check_author(candidate, author, enforce)
            data: dict[str, Any] = read_json(candidate)
        except (ForgedRecord, CorruptFile) as exc:
            log.warning("ignoring %s: %s", candidate, exc)
            continue
        return data
    return None
