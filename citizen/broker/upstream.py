"""The broker's connections to the operator's model endpoints: stdlib `http.client`,
one kept-alive connection per endpoint per thread.

Measured here (bench/broker.py's upstream, 500 calls): httpx2 took 2.25 ms a request
and http.client 1.64 ms - the difference was more than half of all the broker added,
so the forwarding leg uses the standard library. TLS verifies against the system's CA
store (`ssl.create_default_context`).
"""

from __future__ import annotations

import functools
import http.client
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from citizen.errors import CitizenError

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0  # a long generation streams for minutes
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class Unreachable(CitizenError, OSError):
    """The endpoint could not be reached: nothing was sent, so nothing can be billed."""


class Broken(CitizenError, OSError):
    """The request went out but the answer did not come back whole."""


@dataclass
class Answer:
    """An upstream's answer: status, headers, and its body to read once; `close()` it."""

    status: int
    headers: Mapping[str, str]
    _resp: http.client.HTTPResponse
    _drop: Callable[[], None]

    def close(self) -> None:
        """Done with it: a body not read to its end makes the connection unusable."""
        if not self._resp.isclosed():
            self._drop()

    def read(self) -> bytes:
        """:raises Broken: the body was cut."""
        try:
            return self._resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise Broken(str(exc)) from exc

    def chunks(self, size: int = 65536) -> Iterator[bytes]:
        """The body as it arrives. :raises Broken: it was cut."""
        try:
            while chunk := self._resp.read1(size):
                yield chunk
        except (OSError, http.client.HTTPException) as exc:
            raise Broken(str(exc)) from exc


class Upstreams:
    """Connections per (thread, endpoint); a connection found closed is made anew once."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._tls = ssl.create_default_context()

    def post(self, base_url: str, path: str, body: bytes,
             headers: Mapping[str, str]) -> Answer:
        """:raises Unreachable: not connected, nothing sent. :raises Broken: sent, no answer."""
        url = urllib.parse.urlsplit(base_url)
        key = (url.scheme, url.hostname or "", url.port)
        target = url.path.rstrip("/") + path
        pool: dict[tuple[str, str, int | None], http.client.HTTPConnection] = \
            self._local.__dict__.setdefault("pool", {})
        conn = pool.get(key)
        reused = conn is not None
        for _ in range(2):
            if conn is None:
                conn = self._connect(key)
                pool[key] = conn
            try:
                conn.request("POST", target, body=body, headers=dict(headers))
                resp = conn.getresponse()
            except _STALE as exc:
                conn.close()
                del pool[key]
                if not reused:
                    raise Broken(str(exc)) from exc
                conn, reused = None, False  # the kept connection had closed: once more
                continue
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                del pool[key]
                raise Broken(str(exc)) from exc
            return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp,
                          functools.partial(self._drop, key, conn))
        raise Broken("the endpoint closed two connections in a row")

    def _drop(self, key: tuple[str, str, int | None],
              conn: http.client.HTTPConnection) -> None:
        conn.close()
        pool = self._local.__dict__.get("pool", {})
        if pool.get(key) is conn:
            del pool[key]

    def _connect(self, key: tuple[str, str, int | None]) -> http.client.HTTPConnection:
        scheme, host, port = key
        conn: http.client.HTTPConnection
        if scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=CONNECT_TIMEOUT_S,
                                               context=self._tls)
        elif scheme == "http":
            conn = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT_S)
        else:
            raise Unreachable(f"{scheme}: is not an endpoint scheme (http or https)")
        try:
            conn.connect()
        except OSError as exc:
            conn.close()
            raise Unreachable(f"cannot connect to {host}:{port or ''} ({exc})") from exc
        if conn.sock is not None:
            conn.sock.settimeout(READ_TIMEOUT_S)
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn
