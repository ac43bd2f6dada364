"""The commons' records as the broker itself reads and writes them (several servers).

A step the broker takes for a citizen - the merge into the baseline, the draw of a
change's reviewers (`citizen.broker.repos`, `citizen.broker.reviews`) - reads the same
records its citizens read and files its own, in the civilization's database, through
its own pool (`Broker.database`): citizens never hold a login, the broker is the
gateway. `Gateway` is `shared.remote.Remote` in process, by the very routes a citizen's
`citizen.access.commons.BrokerCommons` asks over the socket (`citizen.broker.commons`):
the same keys, the same refusals, and the author of what it files is `citizen` - the
caller the kernel named, who lives on this server, or the database refuses the row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, TypeVar

from citizen.access.commons import pages
from citizen.broker import commons
from citizen.broker.refused import Refused
from citizen.broker.server import Broker
from shared.remote import RemoteRefused, Taken

T = TypeVar("T")
Route = Callable[[Broker, str, bytes], tuple[int, Any]]


class Gateway:
    """`shared.remote.Remote` over this broker's database, as `citizen`."""

    def __init__(self, broker: Broker, citizen: str) -> None:
        self.broker = broker
        self.citizen = citizen

    def _ask(self, route: Route, body: dict[str, Any]) -> dict[str, Any]:
        try:
            _, answer = route(self.broker, self.citizen, json.dumps(body).encode())
        except Refused as exc:
            once = (commons.create, commons.file_once)
            if exc.status == 409 and getattr(route, "func", route) in once:
                raise Taken(409, str(exc)) from exc
            raise RemoteRefused(exc.status, str(exc)) from exc
        return dict(answer)

    def create(self, key: str, data: dict[str, Any]) -> dict[str, Any]:
        # filed_by_broker: the merge and draw records, in folders no citizen's route may
        # file in (commons.BROKERS_ONLY) - so a row there is a broker's.
        return self._ask(partial(commons.file_once, filed_by_broker=True),
                         {"key": key, "data": data})

    def write(self, key: str, data: dict[str, Any]) -> dict[str, Any]:
        return self._ask(partial(commons.file_own, filed_by_broker=True),
                         {"key": key, "data": data})

    def read(self, key: str, author: str | None = None) -> dict[str, Any] | None:
        try:
            return self._ask(commons.read, {"key": key, "author": author})
        except RemoteRefused as exc:
            if exc.status == 404:
                return None
            raise

    def records(self, folder: str, *, deep: bool = False) -> list[dict[str, Any]]:
        return pages(lambda after: self._ask(commons.listing, {"folder": folder, "deep": deep,
                                                               "after": after}))

    def folders(self, folder: str) -> list[str]:
        found: list[str] = self._ask(commons.folders, {"folder": folder})["folders"]
        return found

    def stamp(self, folder: str) -> tuple[int, ...]:
        return tuple(int(n) for n in self._ask(commons.stamp, {"folder": folder})["stamp"])

    def document(self, key: str, default: Callable[[], dict[str, Any]]
                 ) -> tuple[dict[str, Any], int]:
        answer = self._ask(commons.document_read, {"key": key})
        data = answer.get("data")
        return (data if isinstance(data, dict) else default()), int(answer.get("version", 0))

    def update(self, key: str, default: Callable[[], dict[str, Any]],
               change: Callable[[dict[str, Any]], T]) -> T:
        raise RemoteRefused(501, "the broker's own steps write records, not documents")

    def lease(self, name: str, seconds: float) -> AbstractContextManager[None]:
        # Why refused: the broker's steps are serialized by its own lock, and across
        # servers by records whose first one stands (a draw); a lease would be a second order.
        raise RemoteRefused(501, "the broker's own steps take no lease")

    def ring(self, citizen: str, wake_type: str, reason: str) -> str:
        return str(self._ask(commons.ring, {"citizen": citizen, "wake_type": wake_type,
                                            "reason": reason})["server"])

    def citizens(self) -> dict[str, str]:
        """Every citizen of the civilization -> the server it lives on."""
        return {c["name"]: c["server"] for c in self._ask(commons.everyone, {})["citizens"]}
