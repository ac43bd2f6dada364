"""The one read-modify-write of a shared JSON document.

`Document` is a shared JSON document changed under the one lock (`shared.locks.locked`,
a blocking flock on `.<name>.lock` beside it): written to a temp file in the same
directory, fsynced, `os.replace`d; `schema_version` checked on every read; a corrupt or
unknown document raises `CorruptFile` naming the file, never reset.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from shared.atomic import CorruptFile, append_line, read_json, write_json
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
        """Read, change and write the document under its lock; returns what `change` returns.

        :raises CorruptFile: the document is unusable; nothing is written.
        """
        with locked(self.path, mode=self.mode):
            data = self.read()
            result = change(data)
            data["schema_version"] = self.schema_version
            write_json(self.path, data, mode=self.mode)
            return result


def append_history(path: Path, record: dict[str, Any]) -> None:
    """Append one record to a JSONL history (append-only; O_APPEND keeps lines whole)."""
    append_line(path, record, mode=DOCUMENT_MODE)


__all__ = ["CorruptFile", "Document", "append_history"]
