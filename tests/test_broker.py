"""The broker in dev mode: every model call goes through it, reserved, forwarded, settled.

The real SDK talks to the broker over its Unix socket; the broker talks to a local
Messages API server (tests/anthropic_server.py) or, for streaming, to a small
server-sent-events upstream here. What a rewritten daemon would send is sent raw, with
httpx2 over the same socket. (Identity by the kernel with real Unix users, and the
operator's files on a server, are tested in tests/server_install/.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from citizen import config
from citizen.access import client
from citizen.broker import service
from citizen.broker.ledger import CapExceeded, Caps, Ledger
from citizen.config import paths
from citizen.home.spend import DailyCapReached
from citizen.llm import make_provider
from citizen.llm.base import Request, Usage
from tests.anthropic_server import API_KEY, MessagesServer, text

pytestmark = pytest.mark.usefixtures("civ")
PRICE = config.templates().prices["claude-opus-4-6"]


def setup_opus(civ: Path, url: str, **budget: Any) -> None:
    (civ / "opus" / ".env").write_text(f"ANTHROPIC_API_KEY={API_KEY}\nANTHROPIC_BASE_URL={url}\n")
    if budget:
        path = civ / "opus" / "config.json"
        data = json.loads(path.read_text())
        data["budget"] = {**data.get("budget", {}), **budget}
        path.write_text(json.dumps(data))


def ask(max_tokens: int = 100) -> Any:
    llm = make_provider(config.load_citizen("opus"), config.load_secrets("opus"))
    return llm.complete(Request(system=("You are opus.",), max_tokens=max_tokens,
                                messages=({"role": "user", "content": "Say hi"},),
                                purpose="test"))


def ledger_rows() -> list[dict[str, Any]]:
    db = sqlite3.connect(service.ledger_path())
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT * FROM calls ORDER BY id")]
    finally:
        db.close()


def raw(body: dict[str, Any], citizen: str = "opus", **headers: str) -> httpx2.Response:
    """What a daemon rewritten to call the broker directly sends."""
    with client.http_client(citizen, timeout_s=30) as http:
        return http.post("/v1/messages", json=body, headers=headers)


def body(model: str = "claude-opus-4-6", max_tokens: int = 50, **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hi"}], **extra}


def test_a_call_goes_through_the_broker_with_the_operators_key(
        civ: Path, messages_api: MessagesServer) -> None:
    setup_opus(civ, messages_api.url)
    messages_api.reply(text("hello", input_tokens=120, output_tokens=30))
    reply = ask()
    assert reply.text == "hello"
    assert messages_api.headers[0]["x-api-key"] == API_KEY  # added by the broker
    (row,) = ledger_rows()
    expected = (120 * PRICE.input + 30 * PRICE.output) / 1e6
    assert row["state"] == "settled" and row["cost_usd"] == pytest.approx(expected)
    assert row["reserved_usd"] >= row["cost_usd"]  # the worst case was reserved first
    assert (row["citizen"], row["purpose"]) == ("opus", "test")
    # A wake's first cap check asks this one figure instead of reading every peer's ledger.
    assert client.civilization_spent("mira") == pytest.approx(row["cost_usd"], abs=1e-6)


def test_the_key_the_caller_sends_is_dropped(civ: Path, messages_api: MessagesServer) -> None:
    setup_opus(civ, messages_api.url)
    messages_api.reply(text("ok"))
    resp = raw(body(), **{"x-api-key": "sk-the-citizens-own", "authorization": "Bearer x"})
    assert resp.status_code == 200
    assert messages_api.headers[0]["x-api-key"] == API_KEY
    assert "authorization" not in messages_api.headers[0]


def test_a_spent_daily_cap_forwards_nothing(civ: Path, messages_api: MessagesServer) -> None:
    setup_opus(civ, messages_api.url, max_usd_per_day=0.0001)
    with pytest.raises(DailyCapReached, match="daily cap"):
        ask()
    # Only the (free) count-tokens request went out; no message was forwarded.
    assert [r for r in messages_api.requests if "max_tokens" in r] == []
    # Refused at $0: the operator sees the refusal, and nothing counts against a cap.
    assert [(r["state"], r["cost_usd"]) for r in ledger_rows()] == [("refused", 0)]


def test_a_cap_lowered_while_the_broker_runs_holds_from_the_next_call(
        civ: Path, messages_api: MessagesServer) -> None:
    """The broker keeps where a citizen's rule files are (citizen.broker.rules.RuleCache),
    never what they said: the cap the operator lowers refuses the very next call."""
    setup_opus(civ, messages_api.url, max_usd_per_day=50.0)
    messages_api.reply(text("hi"))
    assert ask().text == "hi"
    setup_opus(civ, messages_api.url, max_usd_per_day=0.0001)
    with pytest.raises(DailyCapReached, match="daily cap"):
        ask()
    assert len(messages_api.forwarded()) == 1  # the first call only


def test_a_rewritten_daemon_gets_nothing_past_the_rules(
        civ: Path, messages_api: MessagesServer) -> None:
    setup_opus(civ, messages_api.url, max_usd_per_day=1.0)
    refusals = {
        "a model outside its council": raw(body(model="claude-mythos-9")),
        "an image (its tokens cannot be bounded)": raw(body(messages=[{"role": "user",
            "content": [{"type": "image", "source": {"type": "base64",
                                                      "media_type": "image/png",
                                                      "data": "iVBORw0KGgo="}}]}])),
        "a server tool that bills per use": raw(body(tools=[{"type": "web_search_20250305",
                                                            "name": "web_search"}])),
        "a key the broker does not forward": raw(body(service_tier="priority")),
        "a worst case past the cap": raw(body(max_tokens=64000)),
        "a call for another citizen": raw(body(), citizen="../mira"),
        "an API version it has not priced": raw(body(), **{"anthropic-version": "2099-01-01"}),
    }
    statuses = {why: r.status_code for why, r in refusals.items()}
    assert statuses == {
        "a model outside its council": 403, "an image (its tokens cannot be bounded)": 400,
        "a server tool that bills per use": 400, "a key the broker does not forward": 400,
        "a worst case past the cap": 402, "a call for another citizen": 400,
        "an API version it has not priced": 400}
    assert [r for r in messages_api.requests if "max_tokens" in r] == []  # none forwarded
    # The cap's refusal is kept at $0 for the operator (`citizen spend`, the dashboard);
    # nothing else was recorded, nothing reserved.
    assert [(r["state"], r["cost_usd"], r["citizen"]) for r in ledger_rows()] == [
        ("refused", 0, "opus")]


def test_kill_9_of_the_broker_loses_no_reservation(
        civ: Path, messages_api: MessagesServer) -> None:
    setup_opus(civ, messages_api.url)
    messages_api.reply(text("late"), delay_s=30)
    caught: list[BaseException] = []

    def call() -> None:
        try:
            raw(body())
        except httpx2.HTTPError as exc:
            caught.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    until(lambda: len(messages_api.requests) == 1)  # forwarded, so reserved before
    (row,) = ledger_rows()
    assert row["state"] == "reserved"
    pid = int((paths.broker_state() / "broker.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid))  # gone, not dying
    worker.join(10)
    assert caught  # the caller saw its call fail
    client.ensure()  # a new broker, on the same ledger
    (row,) = ledger_rows()
    assert row["state"] == "orphaned" and row["cost_usd"] == row["reserved_usd"]
    assert client.whoami("opus")["spent_today_usd"] == pytest.approx(row["reserved_usd"], abs=1e-6)


def test_one_citizens_flood_does_not_starve_another(
        civ: Path, messages_api: MessagesServer) -> None:
    setup_opus(civ, messages_api.url, max_concurrent_calls=2)
    (civ / "mira" / ".env").write_text(
        f"ANTHROPIC_API_KEY={API_KEY}\nANTHROPIC_BASE_URL={messages_api.url}\n")
    for _ in range(2):
        messages_api.reply(text("slow"), delay_s=3)
    statuses: list[int] = []
    barrier = threading.Barrier(12)

    def flood() -> None:
        barrier.wait()
        statuses.append(raw(body()).status_code)

    threads = [threading.Thread(target=flood) for _ in range(12)]
    for t in threads:
        t.start()
    until(lambda: len(messages_api.requests) == 2 and len(statuses) == 10)
    messages_api.reply(text("mira's"))
    mira = raw(body(model=config.load_citizen("mira").seat("primary").model), citizen="mira")
    assert mira.status_code == 200 and "mira's" in mira.text
    for t in threads:
        t.join(10)
    assert sorted(statuses) == [200, 200] + [429] * 10


def test_the_rate_per_minute_is_the_citizens_own(civ: Path, messages_api: MessagesServer) -> None:
    setup_opus(civ, messages_api.url, max_calls_per_minute=3)
    messages_api.responder = lambda _body: text("ok")
    statuses = [raw(body()).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    over = raw(body())
    assert int(over.headers["retry-after"]) >= 1 and "max_calls_per_minute" in over.text


def test_a_streamed_call_settles_from_its_events(civ: Path) -> None:
    with sse_upstream(complete=True) as url:
        setup_opus(civ, url)
        sdk = anthropic.Anthropic(api_key=client.PLACEHOLDER_KEY, base_url=client.BASE_URL,
                                  http_client=client.http_client("opus"), max_retries=0)
        with sdk.messages.stream(**body()) as stream:
            assert stream.get_final_text() == "streamed"
    (row,) = ledger_rows()
    assert row["state"] == "settled"
    assert row["cost_usd"] == pytest.approx((50 * PRICE.input + 7 * PRICE.output) / 1e6)


def test_a_stream_cut_short_costs_its_reservation(civ: Path) -> None:
    with sse_upstream(complete=False) as url:
        setup_opus(civ, url)
        with client.http_client("opus") as http:
            http.post("/v1/messages", json=body(stream=True))
    (row,) = ledger_rows()
    assert row["state"] == "settled" and row["cost_usd"] == row["reserved_usd"]


def test_a_reservation_never_crosses_a_cap_under_concurrency(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.db")
    caps = Caps(citizen_day=1.0, citizen_month=10.0, civilization_day=10.0,
                civilization_month=100.0)
    granted: list[int] = []

    def reserve() -> None:
        with contextlib.suppress(CapExceeded):
            granted.append(ledger.reserve("opus", "m", 0.3, caps))

    threads = [threading.Thread(target=reserve) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 3  # 3 x 0.3 fits under 1.0, a fourth would not
    ledger.release(granted[0], 500)
    ledger.settle(granted[1], 0.05, Usage(10, 2), status=200)
    assert ledger.spent("opus") == pytest.approx(0.35)  # 0 + 0.05 + 0.3 still reserved
    ledger.close()
    again = Ledger(tmp_path / "ledger.db")  # a restart: the open one counts, orphaned
    assert again.orphaned == 1 and again.spent("opus") == pytest.approx(0.35)


# ------------------------------------------------------------------ helpers


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def until(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s")
        time.sleep(0.02)


class _SSE(BaseHTTPRequestHandler):
    complete = True

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        events = [
            ("message_start", {"type": "message_start", "message": {
                "id": "msg_1", "type": "message", "role": "assistant",
                "model": "claude-opus-4-6", "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": {"input_tokens": 50, "output_tokens": 1}}}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "streamed"}}),
        ]
        if self.complete:
            events += [
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta", "delta": {
                    "stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 7}}),
                ("message_stop", {"type": "message_stop"})]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        for name, data in events:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()


class sse_upstream:
    def __init__(self, complete: bool) -> None:
        handler = type("H", (_SSE,), {"complete": complete})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

