"""The commons kept elsewhere: what a protocol asks when its records are not files here.

On one server the commons is files under `shared/` and authorship is each file's owner.
In a civilization of several servers the records, documents, leases and rings live in
one database, reached through the citizen's own server's broker (`citizen.access.
commons.BrokerCommons` answers this protocol; the broker stamps the author from the
kernel's word, and the database refuses any other server's citizen). A protocol given a
`Remote` keeps the same rules and the same record names: a record's key is its path
relative to the commons' root (`key`).

What differs, and why it is safe:
- a record is its author's at its key: each author writes in a namespace of its own, so
  a peer's row at a place named for another is the peer's, and never keeps the named
  one from writing there (the file backend writes beside such a planted file);
- a step's record is created once by its author (`create`, `Taken` if the author made
  it already): the same "a step is taken once" the file backend gets from O_EXCL;
- a shared document is written only at the version it was read (`update` retries): no
  update is lost, as under the file backend's lock;
- a lock held across a citizen's read-check-write is a lease (`lease`): the database's
  row with an expiry, so a holder that dies frees it after `seconds`, as the kernel drops
  a dead holder's flock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from shared.errors import NotAllowed, SharedError

T = TypeVar("T")


class RemoteRefused(SharedError):
    """The commons' keeper refused a step; `status` is its HTTP status (404 none, 409
    taken or changed since read, 403 not yours, 429 too many calls, 503 unreachable)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Taken(RemoteRefused, NotAllowed):
    """A record that may exist once exists already (a step is taken once)."""


class Remote(Protocol):
    """The commons' records, documents, leases and rings, kept by the civilization."""

    citizen: str  # who this process writes as (the keeper checks it is so)

    def create(self, key: str, data: dict[str, Any]) -> dict[str, Any]: ...
    def write(self, key: str, data: dict[str, Any]) -> dict[str, Any]: ...
    def read(self, key: str, author: str | None = None) -> dict[str, Any] | None: ...
    def records(self, folder: str, *, deep: bool = False) -> list[dict[str, Any]]: ...
    def folders(self, folder: str) -> list[str]: ...
    def stamp(self, folder: str) -> tuple[int, ...]: ...
    def document(self, key: str, default: Callable[[], dict[str, Any]]
                 ) -> tuple[dict[str, Any], int]: ...
    def update(self, key: str, default: Callable[[], dict[str, Any]],
               change: Callable[[dict[str, Any]], T]) -> T: ...
    def lease(self, name: str, seconds: float) -> AbstractContextManager[None]: ...
    def ring(self, citizen: str, wake_type: str, reason: str) -> str: ...
    def citizens(self) -> dict[str, str]: ...


def key(top: Path, path: Path) -> str:
    """`path`'s key: its place relative to the commons' root `top` ('debates/<id>/…')."""
    return path.relative_to(top).as_posix()


def under(records: list[dict[str, Any]], folder: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name relative to `folder`, record) for each record listed beneath it."""
    cut = len(folder) + 1
    for rec in records:
        if str(rec.get("key", "")).startswith(f"{folder}/"):
            yield str(rec["key"])[cut:], rec


__all__ = ["Remote", "RemoteRefused", "Taken", "key", "under"]
