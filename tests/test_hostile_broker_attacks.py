"""A hostile citizen attacks the broker on a booted server, with real Unix users.

Each test is one attack a citizen's own Unix user can make (its daemon included: the
citizen may rewrite it) against `experience-broker.service`: spend past the caps, be
billed at a price the worst case did not count, pass for another citizen, read what
the broker holds, or take the broker away from the other citizens. The citizens'
daemons are not started: every attack is made by hand, as the citizen's user, on the
broker's socket (the scripts it runs and the helpers: tests/broker_attack_tools.py).
Boots its own container (tests/nspawn.py); root and systemd-nspawn needed, skipped
with the reason elsewhere.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from citizen.broker import server as broker_server
from citizen.config import paths
from tests.anthropic_server import MessagesServer, text
from tests.broker_attack_tools import (
    BLOAT,
    CALL,
    GIVE_FD,
    IDLE,
    RAW,
    TAKE_FD,
    RawMessagesServer,
    as_user,
    broker_pid,
    broker_status,
    call,
    model_of,
    permitted,
    raw_call,
    restart_broker,
    spent_today,
)
from tests.nspawn import PYTHON, Container, operator_budget, set_up_server, unavailable, until

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

KEY = f"sk-ant-attack-{secrets.token_hex(12)}"  # made at run time (see test_hostile_server)
CITIZENS = ("opus", "mira", "aria")


@pytest.fixture(scope="module")
def upstream() -> Iterator[RawMessagesServer]:
    server = RawMessagesServer()
    server.start()
    server.api_key = KEY
    yield server
    server.stop()


@pytest.fixture(scope="module")
def box(upstream: RawMessagesServer) -> Iterator[Container]:
    with set_up_server(paths.project_dir(), "experience-attack") as (box, _):
        for name in CITIZENS:
            box.run("sh", "-c", f"printf 'ANTHROPIC_API_KEY={KEY}\\nANTHROPIC_BASE_URL="
                    f"{upstream.url}\\n' > /etc/experience/{name}.env")
        # The citizens' daemons stay stopped: every call in this module is the attack's,
        # each under its caller's wake permit (broker_attack_tools.PERMIT), three at once.
        box.run("sh", "-c", "echo '{\"max_working_wakes\": 3}' > /etc/experience/broker.json")
        yield box


@pytest.fixture
def api(upstream: RawMessagesServer) -> RawMessagesServer:
    upstream.queue.clear()
    upstream.requests.clear()
    upstream.headers.clear()
    upstream.raw.clear()
    upstream.responder = None
    return upstream


# ---------------------------------------------------------------- what held


def test_the_ledger_and_the_keys_are_out_of_a_citizens_reach(box: Container) -> None:
    """Reading the money or the keys: the ledger database (or its WAL), another
    citizen's key file, its own key file, `citizen spend`."""
    for path in ("/var/lib/experience-broker/ledger.db", "/var/lib/experience-broker/ledger.db-wal",
                 "/etc/experience/mira.env", "/etc/experience/opus.env"):
        out = as_user(box, "opus", "cat", path)
        assert "Permission denied" in out or "No such file" in out, (path, out)
    assert "Permission denied" in as_user(box, "opus", "ls", "/var/lib/experience-broker")
    out = as_user(box, "opus", PYTHON, "-c",
                  "import sqlite3; sqlite3.connect('file:/var/lib/experience-broker/ledger.db"
                  "?mode=ro', uri=True).execute('select 1 from calls').fetchall()")
    assert "unable to open" in out, out
    assert KEY not in as_user(box, "opus", "citizen", "spend")


def test_a_user_namespace_root_is_still_the_citizen(box: Container, api: MessagesServer) -> None:
    """`unshare -r` makes the citizen uid 0 in its own namespace; the broker sees the uid
    the kernel maps to its namespace (opus), so naming mira is refused."""
    probe = as_user(box, "opus", "unshare", "-r", "id", "-u")
    if probe.strip() != "0":
        pytest.skip(f"no unprivileged user namespace here ({probe.strip()})")
    out = as_user(box, "opus", "unshare", "-r", PYTHON, "-c", RAW, json.dumps(call()),
                  "x-experience-citizen: mira")
    assert out.startswith("403"), out
    assert api.forwarded() == []


def test_a_passed_connection_is_charged_to_whoever_connected(box: Container) -> None:
    """SCM_RIGHTS: opus hands its connected socket to mira. The broker knows a connection
    by who connected (SO_PEERCRED is fixed at connect()), so mira speaks as opus - on
    opus's budget, which only opus can give away."""
    result: list[str] = []
    giver = threading.Thread(target=lambda: result.append(
        as_user(box, "opus", PYTHON, "-c", GIVE_FD)))
    giver.start()
    out = as_user(box, "mira", PYTHON, "-c", TAKE_FD, timeout=90)
    giver.join(90)
    assert json.loads(out)["citizen"] == "opus", out


def test_racing_calls_never_reserve_past_the_cap(box: Container, api: MessagesServer) -> None:
    """20 calls at once, each worth a third of what is left of aria's day: three go out."""
    operator_budget(box, "aria", max_concurrent_calls=30, max_calls_per_minute=600)
    model, price = model_of(box, "aria")
    body = call(model=model, max_tokens=1000)
    worst = (len(json.dumps(body)) * price["cache_write"] + 1000 * price["output"]) / 1e6
    operator_budget(box, "aria", max_usd_per_day=round(spent_today(box, "aria")
                                                      + 3.5 * worst, 6))

    def slow(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(5)  # every call still in flight when the last one reserves
        return text("ok", input_tokens=0, output_tokens=0)

    api.responder = slow
    race = permitted("import json, sys, threading, httpx2\n"
                     "out = []\n"
                     "def one():\n"
                     "    t = httpx2.HTTPTransport(uds='/run/experience-broker/broker.sock')\n"
                     "    with httpx2.Client(transport=t, base_url='http://broker', timeout=60)"
                     " as c:\n"
                     "        out.append(c.post('/v1/messages', json=json.loads(sys.argv[1]))"
                     ".status_code)\n"
                     "ts = [threading.Thread(target=one) for _ in range(20)]\n"
                     "[x.start() for x in ts]; [x.join() for x in ts]\n"
                     "print(sorted(out))\n")
    out = as_user(box, "aria", PYTHON, "-c", race, json.dumps(body))
    assert out.strip() == str([200] * 3 + [402] * 17), out
    assert len(api.forwarded()) == 3


def test_control_characters_in_the_purpose_never_reach_the_ledger(
        box: Container, api: MessagesServer) -> None:
    api.reply(text("ok"))
    out = raw_call(box, "opus", call(), "x-experience-purpose: \x1b]0;owned\x07\x1b[2Jwake")
    assert out.startswith("200"), out
    purposes = box.run(PYTHON, "-c", "import sqlite3; print(repr([r[0] for r in sqlite3.connect("
                       "'/var/lib/experience-broker/ledger.db').execute('select purpose from "
                       "calls')]))").stdout
    assert "\\x1b" not in purposes and "\\x07" not in purposes, purposes
    assert "]0;owned[2Jwake" in purposes


def test_content_the_bytes_cannot_bound_is_refused(box: Container, api: MessagesServer) -> None:
    """Images hidden in a tool_result, a server tool, an extra top-level key (`speed`,
    `service_tier`, `mcp_servers` bill more): refused before anything is reserved."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}}
    bodies = [
        call(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                      "content": [{"type": "tool_result",
                                                                   "content": [image]}]}]}]),
        call(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
        call(speed="fast"), call(service_tier="auto"),
        call(mcp_servers=[{"type": "url", "url": "http://x", "name": "x"}]),
        call(system=[{"type": "document", "source": {"type": "text", "data": "x",
                                                     "media_type": "text/plain"}}]),
    ]
    for body in bodies:
        out = raw_call(box, "opus", body)
        assert out.startswith("400"), (body, out)
    assert api.forwarded() == []


# ---------------------------------------------------------------- what broke


def test_idle_connections_of_one_citizen_do_not_lock_the_others_out(
        box: Container, api: MessagesServer) -> None:
    """One thread and one descriptor per connection, no limit on either: opus opens
    connections and sends nothing; once the broker's 1024 descriptors are gone it accepts
    no connection at all, and mira's call never gets an answer."""
    box.run("rm", "-f", "/home/opus/held")
    box.run("systemd-run", "--quiet", "--unit=attack-idle", "-p", "User=opus", PYTHON, "-c",
            IDLE)
    try:
        until(lambda: box.run("test", "-f", "/home/opus/held", check=False).returncode == 0,
              timeout=120)
        api.reply(text("mira's"))
        out = as_user(box, "mira", PYTHON, "-c", CALL, "15",
                      json.dumps(call(model=model_of(box, "mira")[0])))
        held = box.run("cat", "/home/opus/held").stdout
        limit = box.run("grep", "open files", f"/proc/{broker_pid(box)}/limits").stdout
        assert out.startswith("200"), (out, f"opus holds {held}", limit)
        assert broker_status(box, "Threads") < 200, (f"opus holds {held}", limit)
    finally:
        box.run("systemctl", "stop", "attack-idle", check=False)
        box.run("systemctl", "reset-failed", "attack-idle", check=False)
    restart_broker(box)  # a broken broker spins on accept(): the next tests get a fresh one


def test_one_citizen_cannot_exhaust_the_brokers_memory(box: Container) -> None:
    """Every request body is read whole and parsed before any limit applies: a few
    bodies of nested empty lists take the broker past its MemoryMax (1G) - it is killed,
    and every citizen's call in flight dies with it (settled at its worst case)."""
    restart_broker(box)
    pid = broker_pid(box)
    size = broker_server.MAX_BODY
    out = as_user(box, "opus", PYTHON, "-c", BLOAT, "6", str(size), timeout=300)
    time.sleep(2)
    assert broker_pid(box) == pid, f"the broker was killed and restarted ({out})"
    peak_mb = broker_status(box, "VmHWM") // 1024
    assert peak_mb < 700, f"the broker peaked at {peak_mb} MB of its 1024 MB ({out})"


def test_a_beta_that_bills_more_is_not_forwarded(box: Container, api: MessagesServer) -> None:
    """`anthropic-beta: context-1m-2025-08-07` prices input past 200K tokens at twice the
    input price and output at 1.5 times - more than the worst case counts, and than the
    ledger settles at. The broker forwarded any beta the caller named."""
    api.reply(text("ok"))
    out = raw_call(box, "opus", call(), "anthropic-beta: context-1m-2025-08-07")
    sent = [h.get("anthropic-beta", "") for h in api.headers]
    assert not any("context-1m" in b for b in sent), (out, sent)
    assert out.startswith("400"), out  # refused, saying why


def test_a_one_hour_cache_write_is_priced_at_twice_the_input_price(
        box: Container, api: MessagesServer) -> None:
    """`cache_control: {"ttl": "1h"}` writes the cache at twice the input price, more than
    the 5-minute write price the broker knew: it refused such marks. Now (issue 33: the
    stable prefix outlives a gap between wakes) it forwards them, reserving and settling
    their writes at 2x."""
    model, price = model_of(box, "opus")
    api.reply(text("ok", input_tokens=10, output_tokens=1, cache_write=5000,
                   cache_write_1h=5000))
    body = call(model=model, system=[{"type": "text", "text": "x" * 100,
                                      "cache_control": {"type": "ephemeral", "ttl": "1h"}}])
    before = spent_today(box, "opus")
    out = raw_call(box, "opus", body)
    assert out.startswith("200"), out
    settled = (10 * price["input"] + price["output"] + 5000 * 2 * price["input"]) / 1e6
    assert spent_today(box, "opus") - before == pytest.approx(settled, rel=1e-3), out


def test_the_tool_use_system_prompt_is_in_the_worst_case(
        box: Container, api: MessagesServer) -> None:
    """A request with tools is billed for the system prompt the API adds for them (346
    tokens on Claude 4, by Anthropic's pricing page) on top of its own: a 200-byte request
    with one tool bills ~550 input tokens, which its bytes do not bound. The upstream here
    bills as the API does; the cap must hold anyway."""
    operator_budget(box, "aria", max_concurrent_calls=4, max_calls_per_minute=60)
    model, price = model_of(box, "aria")
    body = call(model=model, max_tokens=1,
                tools=[{"name": "t", "input_schema": {"type": "object"}}])
    size = len(json.dumps(body))
    before = spent_today(box, "aria")
    bound = (size * price["cache_write"] + price["output"]) / 1e6
    cap = round(before + bound * 1.2, 6)  # the bytes' bound fits
    operator_budget(box, "aria", max_usd_per_day=cap)
    api.responder = lambda b: text("ok", input_tokens=len(json.dumps(b)) + 346,
                                   output_tokens=1)
    out = raw_call(box, "aria", body)
    assert not out.startswith("403"), out
    after = spent_today(box, "aria")
    assert after <= cap + 1e-9, f"spent ${after:.6f} of a ${cap:.6f} cap ({out})"


def test_the_body_forwarded_is_the_body_priced(box: Container, api: RawMessagesServer) -> None:
    """Duplicate keys: the broker's parser takes the last `model` and `max_tokens`, and
    forwarded the bytes as sent - an upstream whose parser takes the first runs Opus for
    64000 tokens priced as one Haiku token. What goes up must be what was priced."""
    api.reply(text("ok", input_tokens=10, output_tokens=1))
    body = ('{"model": "claude-opus-4-6", "max_tokens": 64000, "messages": '
            '[{"role": "user", "content": "hi"}], "model": "claude-haiku-4-5", '
            '"max_tokens": 1}')
    out = raw_call(box, "opus", body)
    assert out.startswith(("200", "400")), out
    for data in api.raw:
        if b"max_tokens" in data:
            assert data.count(b'"model"') == 1 and data.count(b'"max_tokens"') == 1, data


def test_an_answer_that_says_no_usage_costs_its_worst_case(
        box: Container, api: MessagesServer) -> None:
    """An answer without `usage` (or a cut one) is settled at its reservation, never at 0."""
    before = spent_today(box, "opus")
    answer = text("no usage")
    del answer["usage"]
    api.reply(answer)
    body = call(max_tokens=1000)
    out = raw_call(box, "opus", body)
    assert out.startswith("200"), out
    worst = (len(json.dumps(body)) * 6.25 + 1000 * 25.0) / 1e6  # Opus 4.6's prices
    assert spent_today(box, "opus") - before == pytest.approx(worst, rel=1e-3)


def test_a_request_nested_too_deeply_is_refused_not_dropped(
        box: Container, api: MessagesServer) -> None:
    """JSON nested past the parser's recursion raised RecursionError, which nothing caught:
    the connection was dropped without an answer (and a traceback logged)."""
    # Built inside: 200 KB is past the kernel's limit on one argument.
    nested = RAW.replace("body = sys.argv[1].encode()",
                         "body = ('{\"model\": \"claude-opus-4-6\", \"max_tokens\": 1, "
                         "\"messages\": ' + '[' * 100_000 + ']' * 100_000 + '}').encode()")
    assert nested != RAW
    out = as_user(box, "opus", PYTHON, "-c", nested, "")
    assert out.startswith("400"), out
    assert api.forwarded() == []
