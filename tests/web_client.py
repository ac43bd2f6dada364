"""The operator's browser, without a browser: the dashboard over HTTP from this process
(stdlib only - the booted server's dashboard listens on the loopback it shares with the
host). Logs in with the token, keeps the session cookie, sends the page's CSRF value."""

from __future__ import annotations

import http.client
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.cookiejar import CookieJar


class Operator:
    """A logged-in session on the dashboard at http://127.0.0.1:`port`."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.jar = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def up(self) -> bool:
        """The dashboard answers (its login page)."""
        try:
            return self.get("/login")[0] == 200
        except OSError:  # not listening yet
            return False

    def get(self, path: str) -> tuple[int, str]:
        return self._open(urllib.request.Request(self.url(path)))

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, str]:
        data = urllib.parse.urlencode(fields).encode()
        return self._open(urllib.request.Request(self.url(path), data=data, method="POST"))

    def log_in(self, token: str) -> None:
        status, page = self.post("/login", {"token": token})
        assert status == 200 and "Civilization" in page, (status, page[:300])

    def csrf(self, path: str) -> str:
        status, page = self.get(path)
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert status == 200 and found, (status, page[:300])
        return found.group(1)

    def cookie(self) -> str:
        return "; ".join(f"{c.name}={c.value}" for c in self.jar)

    @contextmanager
    def watching(self, path: str) -> Iterator[str]:
        """An event stream held open (a page's live part) until the block ends; yields
        its first event's data."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers={"Cookie": self.cookie(),
                                               "Accept": "text/event-stream"})
            resp = conn.getresponse()
            assert resp.status == 200, resp.status
            data = []
            while True:
                line = resp.readline().decode().rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and data:
                    break
            yield "\n".join(data)
        finally:
            conn.close()

    def _open(self, request: urllib.request.Request) -> tuple[int, str]:
        try:
            with self.opener.open(request, timeout=30) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
