"""The one read-modify-write of a shared JSON document.

`Document` is a shared JSON document changed under the one lock (`shared.locks.locked`,
a blocking flock on `.<name>.lock` beside it): written to a temp file in the same
directory, fsynced, `os.replace`d; `schema_version` checked on every read; a corrupt or
unknown document raises `CorruptFile` naming the file, never reset.

Every writer of the commons waits for this lock, so `update` holds it for as little as
is safe. In order, and what each step protects:

1. the lock, then read and change: one writer at a time builds on the last version,
   so no update is lost;
2. the new bytes to a temp file and its fsync - under the lock, since the bytes depend
   on what was read, and before the rename: after a power loss the name never points
   at data that is not on disk (a document cut short or empty);
3. `os.replace` over the document: atomic, and at once the version every process
   reads, the next lock holder included; a `kill -9` of anyone at any moment leaves
   the old version or the new one (the rename is the kernel's, whatever dies);
4. the lock let go;
5. the directory's fsync, before `update` returns: the rename itself survives a power
   loss. Once `update` has returned, its change is durable - as before this order.

Why 5 may follow 4: a directory fsync matters only for a power loss (or a kernel
crash), never for a process's death. If the power fails before it, the directory on
disk names one of the versions renamed in turn; each had its data fsynced (2) before
it was renamed, and each contains every change before it (1). The
next holder may read and build on this version before it is durable, but its own
version contains this change, and its own step 5 makes its rename durable before its
`update` returns - so whatever version survives is whole and at least as new as the
newest `update` that returned; an update lost to the power had not returned, as
before. What a `change` function does outside the document with what it read (as
what any reader does: `read` takes no lock) may outlive a power loss that takes that
read version back: act on the document's content after `update` returns if that
matters.

What it buys (bench/documents.py, 32 writers): one fsync fewer under the lock, which
counts when fsyncs are slow (a busy disk); on ext4 the journal commit a released
writer's step 5 starts may still delay the next holder's step 2, and with a fast disk
the 2 cores running 32 writers bound the wait instead. Not done: fsync the temp file
after the rename (outside the lock) - only ext4's `auto_da_alloc` heuristic orders a
renamed-over file's data before the rename; elsewhere a power loss could leave an
empty document. `fdatasync` saves nothing here: a new file's size and blocks must be
committed anyway (it would if the temp file's blocks were written and committed before
the lock was taken, so that step 2 flushed data alone: the next step to measure).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from shared.atomic import CorruptFile, append_line, fsync_dir, read_json, write_json
from shared.locks import locked

T = TypeVar("T")
SCHEMA_VERSION = 1
# 0660: every citizen (group `citizens`) reads and writes the commons; others nothing.
DOCUMENT_MODE = 0o660


class Document:
    """One shared JSON document with a schema version and a default content."""

    def __init__(self, path: Path, default: Callable[[], dict[str, Any]],
                 schema_version: int = SCHEMA_VERSION, mode: int = DOCUMENT_MODE) -> None:
        self.path = path
        self.default = default
        self.schema_version = schema_version
        self.mode = mode

    def read(self) -> dict[str, Any]:
        """The current content (the default when the document does not exist yet).

        :raises CorruptFile: it does not parse, or has another schema version.
        """
        try:
            data: dict[str, Any] = read_json(self.path, self.schema_version)
        except FileNotFoundError:
            return {"schema_version": self.schema_version, **self.default()}
        return data

    def update(self, change: Callable[[dict[str, Any]], T]) -> T:
        """Read, change and write the document under its lock; returns what `change` returns,
        once the new version is durable (its directory fsynced after the lock is let go:
        the module's docstring says why that is safe).

        :raises CorruptFile: the document is unusable; nothing is written.
        """
        with locked(self.path, mode=self.mode):
            data = self.read()
            result = change(data)
            data["schema_version"] = self.schema_version
            write_json(self.path, data, mode=self.mode, sync_dir=False)
        fsync_dir(self.path.parent)  # the rename's durability; the lock is not needed for it
        return result


def append_history(path: Path, record: dict[str, Any]) -> None:
    """Append one record to a JSONL history (append-only; O_APPEND keeps lines whole)."""
    append_line(path, record, mode=DOCUMENT_MODE)


__all__ = ["CorruptFile", "Document", "append_history"]
