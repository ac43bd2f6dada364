"""The operator's view against a citizen's Unix user (issue 42, findings 3, 5 and 7), on
a booted server: root's `citizen status` and the real `citizen-web` service.

Each test is the attack as it broke the code before (ffe564b):
- a FIFO opus planted at its own heartbeat: `citizen status` hung, and so did `GET /`
  (the read was on the event loop: every route, approve included);
- a heartbeat mira made for aria, who had none yet (the folder is everyone's): status
  and the page believed whatever mira wrote in it;
- `POST /login` announcing a gigabyte: the service waited to read it all;
- a Host that is not the dashboard's (DNS rebinding): served like any other.
The same attacks in-process, and the gzip bomb and the sparse ledger:
tests/test_hostile_dashboard.py.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from citizen.config.secrets import web_token_in
from tests.hostile_door.conftest import as_root, as_user
from tests.nspawn import Container, until
from tests.web_client import Operator

pytestmark = pytest.mark.usefixtures("box")

BEATS = "/home/shared/monitor/heartbeats"
WAIT_S = 60  # what a hung reader is given before the test calls it hung


def _free_port() -> int:
    """A loopback port nothing listens on (the box shares the host's network, and other
    booted suites may run a dashboard on 8765)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def page(box: Container) -> Iterator[Operator]:
    """The real citizen-web service (the release's unit, on a port of its own), logged in
    with the operator's token; stopped at the end."""
    port = _free_port()
    as_root(box, "mkdir -p /etc/systemd/system/citizen-web.service.d && "
                 "printf '[Service]\\nExecStart=\\nExecStart=/opt/experience/venv/bin/python "
                 f"-m citizen web --listen 127.0.0.1:{port}\\n' "
                 "> /etc/systemd/system/citizen-web.service.d/port.conf && "
                 "systemctl daemon-reload && systemctl restart citizen-web")
    operator = Operator(port)
    until(operator.up, timeout=60)
    operator.log_in(web_token_in(as_root(box, "cat /etc/experience/web.token")) or "")
    yield operator
    as_root(box, "systemctl stop citizen-web; rm -rf /etc/systemd/system/citizen-web.service.d;"
                 " systemctl daemon-reload")


def _status(box: Container) -> str:
    """Root's `citizen status`, given WAIT_S: a hang is a failure, not a stuck suite."""
    done = box.run("timeout", str(WAIT_S), "citizen", "status", check=False)
    assert done.returncode != 124, "citizen status hung on a citizen's planted file"
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _row(html: str, name: str) -> str:
    start = html.index(f'href="/wakes/{name}"')
    return html[html.rindex("<tr", 0, start):html.index("</tr>", start)]


def test_a_fifo_at_its_own_heartbeat_hangs_neither_status_nor_the_page(
        box: Container, page: Operator) -> None:
    as_root(box, "systemctl stop citizen@opus")  # its daemon would write its own beat
    as_user(box, "opus", f"rm -f {BEATS}/opus.json && mkfifo {BEATS}/opus.json")
    try:
        shown = _status(box)
        assert any("unreadable heartbeat" in line for line in shown.splitlines()
                   if line.startswith("opus")), shown
        status, html = page.get("/")  # urllib's timeout (30 s) is the deadline
        assert status == 200, html[:300]
        assert "unreadable heartbeat" in _row(html, "opus")
        assert "unreadable" not in _row(html, "mira")
        assert page.get("/decisions")[0] == 200  # where approve lives
    finally:
        as_user(box, "opus", f"rm -f {BEATS}/opus.json")


def test_a_heartbeat_a_peer_made_first_is_shown_forged(box: Container, page: Operator) -> None:
    as_root(box, "systemctl stop citizen@aria")
    assert as_root(box, f"test -e {BEATS}/aria.json || echo none").strip() == "none"
    forged = json.dumps({"state": "sleeping", "pid": 1, "updated": datetime.now(UTC)
                         .isoformat(), "next_wake_at": "2099-01-01T00:00:00+00:00"})
    as_user(box, "mira", f"echo '{forged}' > {BEATS}/aria.json")
    mira = as_root(box, "id -u mira").strip()
    try:
        shown = [line for line in _status(box).splitlines() if line.startswith("aria")]
        assert any(f"forged heartbeat - owned by uid {mira}" in line for line in shown), shown
        assert not any("sleeping (pid 1)" in line for line in shown), shown
        html = page.get("/")[1]
        assert "forged heartbeat" in _row(html, "aria") and "2099" not in _row(html, "aria")
    finally:
        as_root(box, f"rm -f {BEATS}/aria.json")


def _exchange(port: int, head: bytes, body_parts: list[bytes]) -> bytes:
    """Send `head` and `body_parts` (not the rest of what `head` announces), then read
    what the server answers until it closes; socket timeouts are the deadline."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(head)
        for part in body_parts:
            conn.sendall(part)
        answer = b""
        while chunk := conn.recv(65536):  # b"": the server closed the connection
            answer += chunk
    return answer


def test_a_gigabyte_login_is_refused_unread(page: Operator) -> None:
    announced = (f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\n"
                 "Content-Type: application/x-www-form-urlencoded\r\n"
                 f"Content-Length: {2**30}\r\n\r\n").encode()
    # Only the head: bytes the server never reads would make its close a reset, which
    # can discard its answer before we read it (TCP, not the dashboard).
    answer = _exchange(page.port, announced, [])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    chunked = (f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\n"
               "Content-Type: application/x-www-form-urlencoded\r\n"
               "Transfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b"%x\r\n%s\r\n" % (2**16, b"x" * 2**16)
    past = b"%x\r\n%s" % (2**16, b"x" * 16)  # 16 bytes past the limit, all of them read
    answer = _exchange(page.port, chunked, [chunk, past])  # never the final 0-chunk
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert page.get("/")[0] == 200  # the service is still there


def test_a_name_the_dashboard_does_not_serve_is_refused(page: Operator) -> None:
    rebound = (f"GET / HTTP/1.1\r\nHost: evil.example:{page.port}\r\n"
               f"Cookie: {page.cookie()}\r\nConnection: close\r\n\r\n").encode()
    answer = _exchange(page.port, rebound, [])
    assert answer.startswith(b"HTTP/1.1 421"), answer[:200]
    assert b"opus" not in answer
