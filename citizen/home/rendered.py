"""A context as a prompt shows it, kept between wakes and keyed by the context's bytes.

Of most contexts a wake needs only what a prompt shows: the text, its token count and,
when the budget cannot take it whole, its pinned and newest lines. The wake's store
keeps all of it beside the contexts (`contexts/rendered/<type>.view`), keyed by a
digest of the context file's bytes and of the token counter. A context whose file did
not change since it was last written or read is then neither parsed, copied, rendered
nor counted again (issue 45: those were most of a wake's CPU); the entries its journal
added since (a wake's history line, at most contexts.JOURNAL_LINES lines) are read and
shown after it.

A view is derived data and never believed without its key: one that does not match
(another key, a torn or hand-edited file, another counter) is made again from the
parsed context, so nothing here can change what a prompt shows. Why it is written
without fsync: a crash can only leave an old or torn view, and neither matches a key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shared import door
from shared.atomic import write_bytes

FOLDER = "rendered"
MAX_VIEW = 16 * 1024 * 1024  # bytes: a view larger is no view (made again)


def counter_id(count: Callable[[str], int]) -> str:
    """Which token counter `count` is: a view's counts hold only for the same one (a
    provider's tokenizer for its model, the estimate, `len`)."""
    owner = getattr(count, "__self__", None)
    who = owner.describe() if owner is not None and hasattr(owner, "describe") else ""
    return f"{getattr(count, '__module__', '')}.{getattr(count, '__qualname__', repr(count))}:{who}"


def key_of(base: bytes, counter: str) -> str:
    """The key of a context file's bytes as `counter` counts them."""
    digest = hashlib.sha256(counter.encode())  # hardware-accelerated: 0.6 ms for 700 KB
    digest.update(b"\0")
    digest.update(base)
    return digest.hexdigest()


@dataclass(frozen=True)
class View:
    """What the prompt shows of one context's bytes: the text, its tokens, and each
    line's start and cost (its tokens + 1 for its newline, as the prompt's fitting
    counts), which lines are pinned, and the file's journal token."""

    key: str
    counter: str
    text: str
    tokens: int
    starts: list[int]
    costs: list[int]
    pinned: list[int]
    journal: str

    def line(self, i: int) -> str:
        end = self.starts[i + 1] - 1 if i + 1 < len(self.starts) else len(self.text)
        return self.text[self.starts[i]:end]


def made(key: str, head: str, lines: list[str], pinned: list[int],
         count: Callable[[str], int], *, journal: str) -> View:
    """The view of a context whose render is `head` + its `lines`, one per line
    (`head` "## type\\n"; no lines: an empty text, as a context with no entries renders)."""
    text = head + "\n".join(lines) if lines else ""
    starts, at = [], len(head)
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    return View(key, counter_id(count), text, count(text) if text else 0, starts,
                [count(line) + 1 for line in lines], pinned, journal)


def path_of(directory: Path, ctype: str) -> Path:
    return directory / FOLDER / f"{ctype}.view"  # a JSON line, then text: no .json


def read(directory: Path, ctype: str, key: str) -> View | None:
    """The kept view of `ctype` if it is the one for `key`, else None (absent, torn,
    another key: made again by the caller)."""
    try:
        # Only a view its reader wrote: a peer able to write into the folder (a lax
        # umask) must not put words in this citizen's prompt, key or no key.
        raw = door.read_capped(path_of(directory, ctype), MAX_VIEW, owner=os.geteuid())
        head, _, body = raw.partition(b"\n")
        data = door.loads(head)
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        text = body.decode()
        if len(text) != data.pop("chars", None):
            return None  # torn (a crash while it was written): made again
        return View(text=text, **data)
    except (OSError, ValueError, TypeError):  # absent, too big, a link, torn, old shape
        return None


def write(directory: Path, ctype: str, view: View) -> None:
    """Keep `view` for the next wake (no fsync: see the module's docstring): its fields
    as a line of JSON, then the text as it is (decoding a text as a JSON string cost
    more than parsing the context it saves parsing)."""
    head = {f.name: getattr(view, f.name) for f in dataclasses.fields(view)
            if f.name != "text"}  # no copies of the lists
    head["chars"] = len(view.text)
    raw = json.dumps(head, separators=(",", ":")).encode() + b"\n" + view.text.encode()
    with contextlib.suppress(OSError):  # a view saves time, never fails a save
        write_bytes(path_of(directory, ctype), raw, durable=False)
