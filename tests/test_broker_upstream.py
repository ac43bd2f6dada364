"""The broker's upstream connections (citizen.broker.upstream): kept alive in one pool that
every caller's thread draws from, and never handed on unless the last answer on them was
read to its end.

A real keep-alive HTTP server on loopback counts the connections it accepts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from citizen.broker.upstream import Upstreams


class _Counting(ThreadingHTTPServer):
    daemon_threads = True
    accepted = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        self.accepted += 1
        super().process_request(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept alive, as the API's connections are
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        asked = self.rfile.read(int(self.headers["content-length"]))
        body = b'{"echo": "' + asked + b'", "pad": "' + b"x" * 100_000 + b'"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def endpoint() -> Iterator[_Counting]:
    server = _Counting(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server: _Counting) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _ask(ups: Upstreams, url: str, what: bytes) -> bytes:
    answer = ups.post(url, "/v1/messages", what, {"content-type": "application/json"})
    try:
        return answer.read()
    finally:
        answer.close()


def test_callers_threads_share_one_kept_connection(endpoint: _Counting) -> None:
    """Each caller's connection has its own thread in the broker; a wake's new connection
    must not cost a new TCP (and TLS) connection upstream."""
    ups, url = Upstreams(), _url(endpoint)
    got: list[bytes] = []
    for i in range(3):
        caller = threading.Thread(target=lambda i=i: got.append(_ask(ups, url, b"%d" % i)))
        caller.start()
        caller.join()
    assert [g[:12] for g in got] == [b'{"echo": "0"', b'{"echo": "1"', b'{"echo": "2"']
    assert endpoint.accepted == 1


def test_a_connection_is_handed_on_only_after_its_answer_was_read_whole(
        endpoint: _Counting) -> None:
    """An answer left unread (a caller gone mid-stream) would be read as the next call's:
    its connection is closed, and one given back twice is in the pool once."""
    ups, url = Upstreams(), _url(endpoint)
    unread = ups.post(url, "/v1/messages", b"a", {"content-type": "application/json"})
    unread.close()
    assert _ask(ups, url, b"b").startswith(b'{"echo": "b"')
    assert endpoint.accepted == 2  # the unread one was not reused
    twice = ups.post(url, "/v1/messages", b"c", {"content-type": "application/json"})
    twice.read()
    twice.close()
    twice.close()
    first = ups.post(url, "/v1/messages", b"d", {"content-type": "application/json"})
    second = ups.post(url, "/v1/messages", b"e", {"content-type": "application/json"})
    assert first.read().startswith(b'{"echo": "d"')
    assert second.read().startswith(b'{"echo": "e"')
    first.close()
    second.close()
    assert endpoint.accepted == 3  # d reused the pooled one; e needed its own
