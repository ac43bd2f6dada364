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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from citizen.access.client import CITIZEN_HEADER, connect
from citizen.errors import CitizenError

T = TypeVar("T")
PREFIX = "/v1/experience/commons/"
MAX_ANSWER = 8 << 20  # a folder's records; more is no answer of the broker's
# A document's update is read, change, write-if-unchanged; a writer that lost the race
# reads again. Bounded: a document changed this often is a bug, not a queue.
MAX_TRIES = 64


class CommonsRefused(CitizenError):
    """The broker refused a commons step; `status` is its HTTP status (409: taken or
    changed since read, 403: not yours, 503: the database is unreachable)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class BrokerCommons:
    """The commons' records, documents and rings, through one broker's socket."""

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
            data = json.loads(answer.read(MAX_ANSWER) or b"{}")
        if answer.status != 200:
            error = data.get("error", {}) if isinstance(data, dict) else {}
            raise CommonsRefused(answer.status, str(error.get("message", data)))
        if not isinstance(data, dict):
            raise CommonsRefused(502, f"the broker's answer to {route} is not an object")
        return data

    # ------------------------------------------------------------ records

    def create(self, key: str, data: dict[str, Any]) -> dict[str, Any]:
        return self.call("record/create", {"key": key, "data": data})

    def write(self, key: str, data: dict[str, Any]) -> dict[str, Any]:
        return self.call("record/write", {"key": key, "data": data})

    def read(self, key: str) -> dict[str, Any] | None:
        try:
            return self.call("record/read", {"key": key})
        except CommonsRefused as exc:
            if exc.status == 404:
                return None
            raise

    def records(self, folder: str) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self.call("record/list", {"folder": folder})["records"]
        return answer

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
        """Read, change and write a document so that no update is lost: written only if
        nobody wrote it since it was read, else read and changed again.

        :raises CommonsRefused: still contended after MAX_TRIES (409), or refused.
        """
        for _ in range(MAX_TRIES):
            data, version = self.document(key, default)
            result = change(data)
            try:
                self.call("document/write", {"key": key, "data": data, "version": version})
            except CommonsRefused as exc:
                if exc.status == 409:
                    continue
                raise
            return result
        raise CommonsRefused(409, f"{key} changed under every one of {MAX_TRIES} tries; "
                             "something rewrites it in a loop - look at who (citizen logs)")

    # ------------------------------------------------------------ rings, citizens

    def ring(self, citizen: str, wake_type: str, reason: str) -> str:
        """Ring `citizen`'s doorbell wherever it lives; the server it lives on."""
        return str(self.call("ring", {"citizen": citizen, "wake_type": wake_type,
                                      "reason": reason})["server"])

    def citizens(self) -> dict[str, str]:
        """Every citizen of the civilization -> the server it lives on."""
        return {c["name"]: c["server"] for c in self.call("citizens", {})["citizens"]}
