"""What a citizen can write does not freeze, crash or fool the operator's view (issue 42,
findings 3, 5 and 7): a FIFO, a link, a parser bomb at its heartbeat, a gzip bomb among
its wake logs, a sparse ledger, a heartbeat forged by a peer - each shows on that
citizen's row only, as "unreadable" or "forged", and every route still answers; a request
to a name the dashboard does not serve, or bigger than any form of it, is refused before
any route reads it. The same attacks by real Unix users: tests/hostile_door/test_dashboard.py.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from citizen.admin import status
from citizen.cli import cli
from citizen.config import paths
from citizen.home import spend, wakelog
from citizen.web import auth, limits
from citizen.web.app import make_app

DEADLINE_S = 60.0  # how long a hung reader is waited for before the test calls it hung


def within(fn: Callable[[], Any], what: str) -> Any:
    """`fn()` in a daemon thread; fails (instead of hanging the suite) when it is still
    blocked after DEADLINE_S - the old code's FIFO reads never return."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(DEADLINE_S)
    if worker.is_alive():
        pytest.fail(f"{what} hung on a citizen's planted file")
    if "error" in out:
        raise out["error"]
    return out["value"]


def logged_in(root: Path) -> TestClient:
    client = TestClient(make_app(root))
    response = client.post("/login", data={"token": auth.load_token()}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return client


def beat(name: str, **fields: Any) -> dict[str, Any]:
    return {"citizen": name, "state": "sleeping", "pid": os.getpid(),
            "updated": datetime.now(UTC).isoformat(), "next_wake_at": None, **fields}


def row_of(page: str, name: str) -> str:
    """The <tr> of citizen `name` on the civilization page."""
    start = page.index(f'href="/wakes/{name}"')
    return page[page.rindex("<tr", 0, start):page.index("</tr>", start)]


@pytest.fixture
def planted(civ: Path) -> Iterator[Path]:
    """opus's heartbeat is a FIFO nobody writes, mira's a line of 100,000 `[`, aria's a
    link to a heartbeat it did not write; the FIFO is opened for writing at the end,
    so a reader the old code left blocked on it lets go."""
    fifo = paths.home("opus").heartbeat
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    paths.home("mira").heartbeat.write_text("[" * 100_000)
    elsewhere = civ / "elsewhere.json"
    elsewhere.write_text(json.dumps(beat("aria", state="waking")))
    paths.home("aria").heartbeat.symlink_to(elsewhere)
    yield civ
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK) if _has_reader(fifo) else -1
    if fd >= 0:
        os.close(fd)


def _has_reader(fifo: Path) -> bool:
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: nobody has it open for reading
        return False
    return True


def test_planted_heartbeats_show_on_their_own_rows_and_every_route_answers(
        planted: Path) -> None:
    client = logged_in(planted)
    page = within(lambda: client.get("/"), "GET /")
    assert page.status_code == 200, page.text[:500]
    assert "unreadable heartbeat" in row_of(page.text, "opus")
    assert "unreadable heartbeat" in row_of(page.text, "mira")  # nested past the cap
    assert "unreadable heartbeat" in row_of(page.text, "aria")  # a link is no heartbeat
    assert "waking" not in row_of(page.text, "aria")  # what the link's target says
    for path in ("/login", "/wakes/opus", "/money", "/decisions"):
        assert within(functools.partial(client.get, path), path).status_code == 200, path


def test_roots_status_shows_a_planted_heartbeat_unreadable_and_returns(planted: Path) -> None:
    done = within(lambda: CliRunner().invoke(cli, ["status"]), "citizen status")
    assert done.exit_code == 0, done.output
    lines = {n: [x for x in done.output.splitlines() if x.startswith(n)]
             for n in ("opus", "mira", "aria")}
    assert all(any("unreadable" in x for x in found) for found in lines.values()), done.output
    as_json = within(lambda: CliRunner().invoke(cli, ["status", "--json"]), "status --json")
    rows = {r["citizen"]: r for r in json.loads(as_json.output)}
    assert rows["opus"]["daemon"].startswith("unreadable heartbeat")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_heartbeat_another_user_wrote_is_shown_forged_not_believed(civ: Path) -> None:
    """A peer that made aria's heartbeat first (the folder is everyone's) writes in it
    a live daemon with a wake in 2099: its file's owner gives it away."""
    path = paths.home("aria").heartbeat
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(beat("aria", pid=1, next_wake_at="2099-01-01T00:00:00+00:00")))
    os.chown(path, 4242, 4242)  # a uid that is not the home's owner: another citizen's
    row = status.citizen_status("aria", measure_disk=False)
    assert row["daemon"].startswith("forged heartbeat - owned by uid 4242"), row["daemon"]
    assert row["next_wake"] is None
    client = logged_in(civ)
    shown = row_of(client.get("/").text, "aria")
    assert "forged heartbeat" in shown and "2099" not in shown


def bomb(path: Path, inflated: int) -> None:
    """A gzip of one wake's first event, then `inflated` bytes of zeros (a few hundred KB
    on disk)."""
    first = json.dumps({"ts": "2026-01-01T00:00:00+00:00", "event": "wake_start"}) + "\n"
    pack = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with path.open("wb") as out:
        out.write(pack.compress(first.encode()))
        zeros = bytes(2**20)
        for _ in range(inflated // len(zeros)):
            out.write(pack.compress(zeros))
        out.write(pack.flush())


def test_a_gzip_bomb_among_the_wake_logs_is_unreadable_not_inflated(civ: Path) -> None:
    logs = paths.home("opus").wake_logs
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / "000007-TASK.jsonl.gz"
    bomb(path, 2 * wakelog.MAX_LOG)
    assert path.stat().st_size < 2**20
    tracemalloc.start()
    try:
        summary = wakelog.summary(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summary["status"] == "unreadable"
    # The old reader held the whole inflated log (2 x MAX_LOG); this one, a MiB at a time.
    assert peak < wakelog.MAX_LOG // 2, f"held {peak} bytes"
    client = logged_in(civ)
    assert "unreadable" in row_of(client.get("/").text, "opus")
    assert client.get("/wakes/opus").status_code == 200
    shown = client.get("/wakes/opus/7")
    assert shown.status_code == 200 and "unreadable log" in shown.text


def test_a_sparse_terabyte_ledger_is_unreadable_on_its_row_only(civ: Path) -> None:
    ledger = spend.ledger(paths.home("opus"), spend.today())
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with ledger.open("wb") as fh:
        os.truncate(fh.fileno(), 2**40)  # no block is written: a terabyte of nothing
    (paths.home("mira").dir / "logs" / "spend").mkdir(parents=True, exist_ok=True)
    spend.record(paths.home("mira"), cost_usd=0.25, wake=1, wake_type="TASK")
    client = logged_in(civ)
    page = client.get("/")
    assert page.status_code == 200, page.text[:300]
    assert "spend ledger unreadable" in row_of(page.text, "opus")
    assert "$0.2500" in row_of(page.text, "mira")
    assert client.get("/money").status_code == 200


def test_a_ledger_line_that_is_no_ledgers_leaves_out_its_citizen_only(civ: Path) -> None:
    for name, line in (("opus", '{"cost_usd": 1, "tokens_in": "many"}'),
                       ("mira", '{"cost_usd": 0.5, "tokens_in": 10}')):
        ledger = spend.ledger(paths.home(name), spend.today())
        ledger.parent.mkdir(parents=True, exist_ok=True)
        ledger.write_text(line + "\n")
    page = logged_in(civ).get("/money")
    assert page.status_code == 200, page.text[:300]
    # A field that lies counts as nothing (spend.totals): the rest of opus's line and
    # mira's ledger are summed, and nothing is left out.
    assert "unreadable" not in page.text and "mira" in page.text and "opus" in page.text
    rows = {r["citizen"]: r for r in spend.totals([paths.home("opus"), paths.home("mira")],
                                                   1, ("citizen",))}
    assert (rows["opus"]["usd"], rows["opus"]["tokens_in"]) == (1.0, 0)
    assert (rows["mira"]["usd"], rows["mira"]["tokens_in"]) == (0.5, 10)


def test_a_row_that_blocks_is_unreadable_within_the_deadline(tmp_path: Path) -> None:
    """What no check foresaw (a reader outside the door opening a FIFO): the rows are
    read within a deadline, the blocked one says so, the others are shown."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def row(name: str) -> dict[str, Any]:
        if name == "opus":
            fifo.read_bytes()  # blocks until someone writes: nobody does
        return {"citizen": name, "unreadable": None}

    try:
        rows = within(lambda: status.statuses(["opus", "mira"], row, deadline_s=1.0),
                      "statuses")
    finally:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # lets the blocked one go
    assert rows[0]["unreadable"].startswith("not read within")
    assert rows[1] == {"citizen": "mira", "unreadable": None}


# Finding 7: the Host header and the body's size, before any route.


def test_a_name_the_dashboard_does_not_serve_is_refused_before_any_route(civ: Path) -> None:
    """DNS rebinding: a page at evil.example made the browser resolve it to 127.0.0.1;
    the browser still says Host: evil.example."""
    client = logged_in(civ)
    assert client.get("/").status_code == 200  # the name it is served as (testserver)
    for host in ("evil.example:8765", "evil.example", "127.0.0.1.evil.example"):
        refused = client.get("/", headers={"host": host})
        assert refused.status_code == 421, (host, refused.status_code)
        assert "opus" not in refused.text and limits.HOSTS_ENV in refused.text
        login = client.post("/login", data={"token": auth.load_token()},
                            headers={"host": host}, follow_redirects=False)
        assert login.status_code == 421
    for host in ("127.0.0.1:8765", "localhost:9000", "[::1]:8765", "LOCALHOST."):
        assert client.get("/", headers={"host": host}).status_code == 200, host


def test_the_operator_names_more_hosts(civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(limits.HOSTS_ENV, "dash.example.org, ops.example.org")
    client = logged_in(civ)
    assert client.get("/", headers={"host": "dash.example.org:443"}).status_code == 200
    assert client.get("/", headers={"host": "evil.example"}).status_code == 421


class Body:
    """A client's body, chunk by chunk, counting what the app pulled."""

    def __init__(self, chunks: int, size: int = 2**16) -> None:
        self.left, self.chunk, self.pulled = chunks, bytes(size), 0

    async def receive(self) -> dict[str, Any]:
        if self.left == 0:
            return {"type": "http.disconnect"}
        self.left -= 1
        self.pulled += 1
        return {"type": "http.request", "body": self.chunk, "more_body": self.left > 0}


def asgi(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]],
         body: Body) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """One request straight into the ASGI app (what uvicorn does): (status, body,
    headers). A test client would read the whole body first; a server does not."""
    import anyio

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "root_path": "", "scheme": "http",
             "query_string": b"", "headers": [(b"host", b"127.0.0.1:8765"), *headers],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8765),
             "extensions": {}, "state": {}}
    anyio.run(app, scope, body.receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], out, start["headers"]


def test_a_login_announcing_a_huge_body_is_refused_unread(civ: Path) -> None:
    body = Body(chunks=400)  # 25 MiB
    status_, text, headers = asgi(make_app(civ), "POST", "/login",
                                  [(b"content-length", str(2**30).encode()),
                                   (b"content-type", b"application/x-www-form-urlencoded")],
                                  body)
    assert status_ == 413, text
    assert body.pulled == 0  # not a byte of it read
    assert (b"connection", b"close") in headers  # so the server reads no more of it either


@pytest.mark.parametrize("path", ["/login", "/decisions/proposals/p-1", "/logout"])
def test_a_chunked_body_past_the_limit_is_refused_without_reading_on(civ: Path,
                                                                     path: str) -> None:
    """Logged in, so the guard reads the body for its CSRF value (without a session it
    refuses before reading anything)."""
    app = make_app(civ)
    _, cookie = app.state.sessions.new()
    body = Body(chunks=400)  # no Content-Length: chunked, 25 MiB if read to the end
    status_, text, _ = asgi(app, "POST", path,
                            [(b"content-type", b"application/x-www-form-urlencoded"),
                             (b"cookie", f"{auth.COOKIE}={cookie}".encode())], body)
    assert status_ == 413, text
    assert body.pulled <= limits.MAX_BODY // len(body.chunk) + 1  # one chunk past, no more


def test_a_form_within_the_limit_still_logs_in(civ: Path) -> None:
    client = TestClient(make_app(civ))
    done = client.post("/login", data={"token": auth.load_token()}, follow_redirects=False)
    assert done.status_code == 303
    reason = client.post("/login", data={"token": "x" * (limits.MAX_BODY + 1)})
    assert reason.status_code == 413
