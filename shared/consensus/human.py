"""An operator's decision on a proposal: `records/<id>/human.json`, read and written so
that nothing a citizen plants in its proposal's folder can forge it or block it.

The folder is its opener's (a citizen's). Whatever that citizen puts at `human.json` -
a directory, a symbolic link, a FIFO, a file of its own - decides nothing when read
(only a plain file with one name counts, in server mode only root's), and does not stop
the operator: root takes the folder (then the sticky bit keeps root's decision from its
opener too) and writes the decision beside the planted object under a name nobody can
guess (`shared.records.beside`), without following any link.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.atomic import create_beneath
from shared.errors import NotAllowed
from shared.records import DIR_MODE, RECORD_MODE, beside, besides
from shared.threads import OPERATOR, PLACE

log = logging.getLogger(__name__)

NAME = "human.json"
MAX_BYTES = 64_000  # a decision is a few lines; more is not one


def read(path: Path, enforce: bool) -> dict[str, Any] | None:
    """The decision at `path` or beside it; None when there is none that counts.

    In server mode (`enforce`) only root's file counts: a person acts through the
    operator CLI as root, and nothing a citizen's process writes - a record "relayed"
    from mail included, since its mail ledger is the citizen's own file - can prove a
    person stood behind it. In dev mode (one Unix user for all) a mail decision relayed
    by the citizen that received it counts."""
    for candidate in [path, *besides(path)]:
        rec = _read_one(candidate, enforce)
        if rec is not None:
            return rec
    return None


def _read_one(path: Path, enforce: bool) -> dict[str, Any] | None:
    raw = _plain_bytes(path, enforce)
    try:
        rec = json.loads(raw) if raw is not None else None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        log.warning("ignoring %s: not valid JSON (%s)", path, exc)
        return None
    if not isinstance(rec, dict) or rec.get("decision") not in ("approve", "reject"):
        return None
    if rec.get(PLACE, path.parent.name) != path.parent.name:
        log.warning("ignoring %s: it was written for %s", path, rec[PLACE])
        return None
    if not enforce and rec.get("relayed_by") and not rec.get("message_id"):
        log.warning("ignoring %s: a mail decision without its Message-ID", path)
        return None
    return rec


def _plain_bytes(path: Path, enforce: bool) -> bytes | None:
    """The bytes of `path` if it is a plain file with one name (root's, in server mode)."""
    try:
        # O_NOFOLLOW: a link is no decision (it would bring its target's owner and words
        # here); O_NONBLOCK: a FIFO planted at the name must not hang the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        # A directory or a FIFO decides nothing, and a hard link could bring another
        # proposal's decision here.
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            log.warning("ignoring %s: not a plain file of its own", path)
            return None
        if enforce and st.st_uid != 0:
            log.warning("ignoring %s: written by uid %d, not by an operator as root "
                        "(`citizen proposal approve|reject`)", path, st.st_uid)
            return None
        return os.read(fd, MAX_BYTES)
    finally:
        os.close(fd)


def write(records_dir: Path, pid: str, record: dict[str, Any], enforce: bool,
          decided: Callable[[], bool]) -> None:
    """Record a decision for proposal `pid` (`decided`: whether one already counts).

    :raises NotAllowed: a decision already counts, or the folder is not a folder.
    """
    folder = records_dir / pid
    if enforce and os.geteuid() == 0:
        _take(folder)
    raw = json.dumps({**record, PLACE: pid}, ensure_ascii=False,
                     separators=(",", ":")).encode()
    for name in (NAME, beside(folder / NAME, OPERATOR).name):
        try:
            # Never through a link: root writes in a folder a citizen owns.
            create_beneath(records_dir, Path(pid, name), raw, mode=RECORD_MODE,
                           dir_mode=DIR_MODE)
            return
        except FileExistsError:
            if decided():
                raise NotAllowed(f"{pid}: a human has already decided") from None
            log.warning("%s was planted by someone else; the decision goes beside it",
                        folder / name)
    raise NotAllowed(f"{pid}: the decision could not be written in {folder} - remove what "
                     "is not root's there and decide again")


def _take(folder: Path) -> None:
    """Root takes a proposal's folder before deciding in it: its opener's, the folder
    would let that citizen delete root's decision (a sticky directory's owner may);
    root's, the sticky bit keeps every record in it from all but its author, and group
    `citizens` still adds the steps to come."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise NotAllowed(f"{folder} is not a proposal's folder (a link or a file is there) "
                         "- remove it; without its records the proposal never runs") from exc
    try:
        os.fchown(fd, 0, -1)
        os.fchmod(fd, DIR_MODE)  # chown may clear setgid; the thread keeps its 3775
    finally:
        os.close(fd)
