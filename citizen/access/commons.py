"""A citizen's side of the commons of a civilization on several servers: its own
server's broker, asked over the broker's socket (`citizen.broker.commons` serves it).

Plain HTTP/1.1 on the Unix socket (http.client, one connection a call): an httpx client
builds a TLS context first, ~59 ms, and a wake asks the commons many times. Who asks is
the kernel's word at the broker (SO_PEERCRED); the citizen header counts only from root
or, in dev mode, the broker's own user (`citizen.broker.identity`).
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from citizen.access.client import CITIZEN_HEADER, connect
from shared.errors import LockTimeout
from shared.locks import pause
from shared.remote import RemoteRefused, Taken

T = TypeVar("T")
PREFIX = "/v1/experience/commons/"
RINGS_VIEW = "/v1/experience/views/rings"  # the scheduler's long poll for far rings
MAX_ANSWER = 8 << 20  # a folder's records; more is no answer of the broker's


CommonsRefused = RemoteRefused  # the broker refused; `status` is its HTTP status


def pages(ask: Callable[[list[str]], dict[str, Any]]) -> list[dict[str, Any]]:
    """Every record of a listing, asking page after page (each at most the broker's
    LIST_MAX) from the last one's [key, author]."""
    found: list[dict[str, Any]] = []
    after = ["", ""]
    while True:
        answer = ask(after)
        found += answer["records"]
        if not answer.get("more") or not answer["records"]:
            return found
        after = [str(found[-1]["key"]), str(found[-1]["author"])]


class BrokerCommons:
    """The commons' records, documents, leases and rings, through one broker's socket
    (`shared.remote.Remote`)."""

    def __init__(self, socket_path: Path, citizen: str, timeout_s: float = 30.0) -> None:
        self.socket_path = socket_path
        self.citizen = citizen
        self.timeout_s = timeout_s

    def call(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """One route; its answer.

        :raises CommonsRefused: the broker refused (its message says why and what to do).
        :raises OSError: no broker answers at the socket.
        """
        raw = json.dumps(body).encode()
        with connect(self.socket_path, self.timeout_s) as sock:
            sock.settimeout(self.timeout_s)
            sock.sendall(f"POST {PREFIX}{route} HTTP/1.1\r\nHost: broker\r\n"
                         f"{CITIZEN_HEADER}: {self.citizen}\r\nContent-Type: application/json"
                         f"\r\nContent-Length: {len(raw)}\r\nConnection: close\r\n\r\n"
                         .encode() + raw)
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            try:
                data = json.loads(answer.read(MAX_ANSWER) or b"{}")
            except ValueError as exc:  # cut, or no broker's answer: a refusal, named
                raise CommonsRefused(502, f"the broker's answer to {route} is not JSON "
                                     f"({exc})") from exc
        if answer.status != 200:
            error = data.get("error", {}) if isinstance(data, dict) else {}
            message = str(error.get("message", data))
            if answer.status == 409 and route == "record/create":
                raise Taken(409, message)
            raise CommonsRefused(answer.status, message)
        if not isinstance(data, dict):
            raise CommonsRefused(502, f"the broker's answer to {route} is not an object")
        return data

    # ------------------------------------------------------------ records

    def create(self, key: str, data: dict[str, Any]) -> dict[str, Any]:
        return self.call("record/create", {"key": key, "data": data})

    def write(self, key: str, data: dict[str, Any]) -> dict[str, Any]:
        return self.call("record/write", {"key": key, "data": data})

    def read(self, key: str, author: str | None = None) -> dict[str, Any] | None:
        """`author`'s record at `key` (None: the first written there), or None."""
        try:
            return self.call("record/read", {"key": key, "author": author})
        except CommonsRefused as exc:
            if exc.status == 404:
                return None
            raise

    def records(self, folder: str, *, deep: bool = False) -> list[dict[str, Any]]:
        """The records in `folder` (`deep`: and in every folder below it), by key and
        author: every page of them."""
        return pages(lambda after: self.call("record/list", {"folder": folder, "deep": deep,
                                                             "after": after}))

    def stamp(self, folder: str) -> tuple[int, ...]:
        """Changes whenever a record beneath `folder` is written."""
        return tuple(int(n) for n in self.call("record/stamp", {"folder": folder})["stamp"])

    def folders(self, folder: str) -> list[str]:
        answer: list[str] = self.call("record/folders", {"folder": folder})["folders"]
        return answer

    # ------------------------------------------------------------ documents

    def document(self, key: str, default: Callable[[], dict[str, Any]]
                 ) -> tuple[dict[str, Any], int]:
        """A document's content (the default before its first write) and version."""
        answer = self.call("document/read", {"key": key})
        data = answer.get("data")
        return (data if isinstance(data, dict) else default()), int(answer.get("version", 0))

    def update(self, key: str, default: Callable[[], dict[str, Any]],
               change: Callable[[dict[str, Any]], T]) -> T:
        """Read, change and write a document as one transaction the broker holds: the
        row locked at `hold`, written at `put` (`citizen.broker.holds`); given back
        unchanged if `change` raises. Writers take their turns in the database's queue.

        :raises CommonsRefused: refused (409: held past its time - call again).
        """
        held = self.call("document/hold", {"key": key})
        data = held["data"] if isinstance(held.get("data"), dict) else default()
        try:
            result = change(data)
        except BaseException:
            self.call("document/drop", {"token": held["token"]})
            raise
        self.call("document/put", {"token": held["token"], "data": data})
        return result

    # ------------------------------------------------------------ leases

    @contextmanager
    def lease(self, name: str, seconds: float) -> Iterator[None]:
        """Hold the lease `name` for the block, waiting at most `seconds` for it; held at
        most `seconds` past a death of this process (the broker's clock frees it).

        :raises LockTimeout: another held it all that time (the message names it).
        """
        started = time.monotonic()
        while True:
            answer = self.call("lease/take", {"name": name, "seconds": seconds})
            if answer.get("taken"):
                break
            if (waited := time.monotonic() - started) >= seconds:
                raise LockTimeout(f"the lease {name} was held by another for {seconds:.0f} s;"
                                  " it frees itself when its holder's time is up - try again")
            pause(waited, seconds)  # a bounded wait for another process: nothing wakes us
        try:
            yield
        finally:
            self.call("lease/give", {"name": name, "token": answer["token"]})

    # ------------------------------------------------------------ rings, citizens

    def ring(self, citizen: str, wake_type: str, reason: str) -> str:
        """Ring `citizen`'s doorbell wherever it lives; the server it lives on."""
        return str(self.call("ring", {"citizen": citizen, "wake_type": wake_type,
                                      "reason": reason})["server"])

    def citizens(self) -> dict[str, str]:
        """Every citizen of the civilization -> the server it lives on."""
        return {c["name"]: c["server"] for c in self.call("citizens", {})["citizens"]}
