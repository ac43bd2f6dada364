"""The HTTP of one broker connection: a body read to its cap, a refused request's body
drained, JSON and error answers in the Messages API's shape. `citizen.broker.server`'s
handler is one of these; the routes are there."""

from __future__ import annotations

import contextlib
import json
import logging
from http.server import BaseHTTPRequestHandler
from typing import Any

from citizen.broker.refused import Refused

log = logging.getLogger(__name__)
# Bytes of one request: more is refused before it is read. Text only (images and
# documents are refused) and 200K tokens fit in ~2 MB; 32 MB of tiny JSON values parse
# to ~800 MB, past the broker's MemoryMax.
MAX_BODY = 4 << 20
# Headers passed back to the caller; everything else stays.
DOWN_HEADERS = ("content-type", "request-id", "retry-after", "x-should-retry")


class Wire(BaseHTTPRequestHandler):
    """One connection; keep-alive between requests, as httpx expects."""

    protocol_version = "HTTP/1.1"

    def address_string(self) -> str:  # a Unix socket has no peer address
        return "unix"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s", format % args)

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("content-length", ""))
        except ValueError:
            raise Refused(411, "invalid_request_error", "a Content-Length is required") \
                from None
        if length < 0 or length > MAX_BODY:
            raise Refused(413, "request_too_large", f"requests are at most {MAX_BODY} bytes")
        self._body_read = True
        return self.rfile.read(length)

    def _drain(self) -> None:
        """Read a refused request's body: closing with it unread makes the kernel reset
        the connection, and the caller would never see why it was refused."""
        if getattr(self, "_body_read", False):
            return
        try:
            length = int(self.headers.get("content-length", "0"))
        except ValueError:
            return
        if 0 < length <= MAX_BODY:
            self.connection.settimeout(5.0)  # a caller that never sends it is not waited for
            with contextlib.suppress(OSError):
                while length > 0 and (got := len(self.rfile.read(min(length, 65536)))):
                    length -= got  # in pieces: refused bodies are never held whole

    def _json(self, status: int, data: Any) -> None:
        self._reply(status, json.dumps(data).encode(), {"content-type": "application/json"})

    def _reply(self, status: int, body: bytes, headers: Any) -> None:
        self.send_response(status)
        for key in DOWN_HEADERS:
            value = headers.get(key) if hasattr(headers, "get") else None
            if value:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, exc: Refused) -> None:
        # What a request left unread would be taken for the next request: close instead.
        self.close_connection = True
        self._drain()
        body = json.dumps({"type": "error", "error": {"type": exc.kind, "message": str(exc)}})
        self._reply(exc.status, body.encode(), {"content-type": "application/json",
                                                **exc.headers})
