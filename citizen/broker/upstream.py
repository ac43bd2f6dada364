"""The broker's connections to the operator's model endpoints: stdlib `http.client`,
kept alive in one pool per endpoint that every connection's thread draws from.

Why shared, not one per thread: the broker has a thread per caller's connection, and a
daemon opens a new connection per wake - with a connection per thread, every wake's
first call opened a new TCP (and TLS) connection upstream, and closed it when the
wake's connection ended (bench/broker_cpu.py, 100 callers of 10 calls each against a
plain-HTTP stand-in: 1430 -> 1330 us of the broker's CPU per call, about 1 ms per
caller's connection - before any TLS handshake, which costs more).

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
# Idle connections kept per endpoint: more calls than this at once are rare (wakes at
# once are bounded by max_working_wakes); past it, a finished call's connection closes.
MAX_IDLE = 32


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
    _done: Callable[[bool], None]  # back to the pool (True: read to its end), or closed
    _closed: bool = False

    def close(self) -> None:
        """Done with it: a body read to its end leaves the connection for the next call;
        one not read to its end makes it unusable, so it is closed. Once only: a
        connection given back twice would carry two calls at once."""
        if not self._closed:
            self._closed = True
            self._done(self._resp.isclosed())

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
    """Idle connections per endpoint, shared by every thread; a call takes one (or
    makes one) and gives it back once its answer is read to its end. One found closed
    by the endpoint is made anew once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the idle lists: taken from and given back by every thread
        self._idle: dict[tuple[str, str, int | None], list[http.client.HTTPConnection]] = {}
        self._tls = ssl.create_default_context()

    def post(self, base_url: str, path: str, body: bytes,
             headers: Mapping[str, str]) -> Answer:
        """:raises Unreachable: not connected, nothing sent. :raises Broken: sent, no answer."""
        url = urllib.parse.urlsplit(base_url)
        key = (url.scheme, url.hostname or "", url.port)
        target = url.path.rstrip("/") + path
        conn = self._take(key)
        reused = conn is not None
        for _ in range(2):
            if conn is None:
                conn = self._connect(key)
            try:
                conn.request("POST", target, body=body, headers=dict(headers))
                resp = conn.getresponse()
            except _STALE as exc:
                conn.close()
                if not reused:
                    raise Broken(str(exc)) from exc
                conn, reused = None, False  # the kept connection had closed: once more
                continue
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise Broken(str(exc)) from exc
            return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp,
                          functools.partial(self._give_back, key, conn))
        raise Broken("the endpoint closed two connections in a row")

    def _take(self, key: tuple[str, str, int | None]) -> http.client.HTTPConnection | None:
        with self._lock:
            idle = self._idle.get(key)
            return idle.pop() if idle else None

    def _give_back(self, key: tuple[str, str, int | None], conn: http.client.HTTPConnection,
                   whole: bool) -> None:
        """A finished call's connection: kept if its answer was read to its end and the
        endpoint left it open, else closed."""
        if whole and conn.sock is not None:
            with self._lock:
                idle = self._idle.setdefault(key, [])
                if len(idle) < MAX_IDLE:
                    idle.append(conn)
                    return
        conn.close()

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
