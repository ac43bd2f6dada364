"""The web dashboard's service (issue 32): no citizen data without the operator's token, a
CSRF value on every POST, a strict CSP with no inline script, what citizens and models wrote
shown as text, secrets redacted, and a wake's page with the same tool calls as
`citizen logs NAME --wake N` (a real wake on the scripted model)."""

from __future__ import annotations

import html
import json
import re
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from citizen.broker import mailstate
from citizen.cli import cli
from citizen.cli.web import _loopback
from citizen.config import paths
from citizen.home import spend
from citizen.home.tasks import TaskQueue
from citizen.llm.base import Reply, ToolCall, Usage
from citizen.wake.flow import run_wake
from citizen.web import auth
from citizen.web.app import make_app
from citizen.web.facts import civilization, decisions
from tests.scripts import Actor, call

INJECTED = "<script>alert(1)</script>"
PAGES = ("/", "/wakes/opus", "/wakes/opus/1", "/decisions", "/money")


def logged_in(root: Path) -> TestClient:
    client = TestClient(make_app(root))
    response = client.post("/login", data={"token": auth.load_token()}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page carries no CSRF value"
    return found.group(1)


def wake(text: str = INJECTED) -> int:
    """A real TASK wake of opus on the scripted model: a reply with `text` and a tool call,
    then the task completed. Returns the wake's number."""
    TaskQueue(paths.home("opus").tasks).add("Write notes/a.md saying a")
    speaks = Reply(text=text, model="scripted", provider="scripted", usage=Usage(100, 10),
                   tool_calls=(ToolCall("c-w", "write_file",
                                        {"path": "notes/a.md", "content": "a"}),))
    actor = Actor(speaks, call("read_file", path="notes/a.md"),
                  call("task_complete", summary="notes/a.md says a"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    return result.number


def test_no_page_and_no_events_without_the_session(civ: Path) -> None:
    wake()
    client = TestClient(make_app(civ))
    for path in (*PAGES, "/events"):
        plain = client.get(path, follow_redirects=False)
        assert plain.status_code == 401, path
        assert "opus" not in plain.text and "notes/a.md" not in plain.text
        browser = client.get(path, headers={"accept": "text/html"}, follow_redirects=False)
        assert browser.status_code == 303 and browser.headers["location"] == "/login"
    client.cookies.set(auth.COOKIE, "eyJpYXQiOiAxfQ==.00")  # a forged session
    assert client.get("/").status_code == 401
    assert client.get("/login").status_code == 200  # the form is all a stranger gets


def test_a_wrong_token_is_refused(civ: Path) -> None:
    client = TestClient(make_app(civ))
    refused = client.post("/login", data={"token": auth.load_token()[:-1] + "x"},
                          follow_redirects=False)
    assert refused.status_code == 401 and "set-cookie" not in refused.headers
    assert client.get("/", follow_redirects=False).status_code == 401


def test_a_post_without_the_csrf_value_is_refused_and_changes_nothing(
        civ: Path, tmp_path: Path) -> None:
    marker = tmp_path / "changed"

    async def change(request: Request) -> Response:
        marker.write_text((await request.body()).decode())
        return PlainTextResponse("changed")

    client = logged_in(civ)
    # A page module's POST route, added as a page would be: the guard checks it too.
    client.app.router.routes.append(Route("/change", change, methods=["POST"]))  # type: ignore[attr-defined]
    token = csrf_of(client.get("/").text)
    for data in ({}, {"csrf": "wrong"}, {"csrf": ""}):
        refused = client.post("/change", data=data)
        assert refused.status_code == 403 and not marker.exists()
    logout = client.post("/logout", data={}, follow_redirects=False)
    assert logout.status_code == 403 and "set-cookie" not in logout.headers
    assert client.get("/").status_code == 200  # still logged in: the logout was refused
    ok = client.post("/change", data={"csrf": token, "what": "x"})
    assert ok.status_code == 200 and marker.read_text() == f"csrf={token}&what=x"
    assert client.post("/change", headers={"x-csrf-token": token}).status_code == 200
    other_site = client.post("/change", data={"csrf": token},
                             headers={"origin": "https://evil.example"})
    assert other_site.status_code == 403


def test_every_page_has_a_strict_csp_and_no_inline_script(civ: Path) -> None:
    wake()
    client = logged_in(civ)
    for path in (*PAGES, "/login"):
        response = client.get(path)
        assert response.status_code == 200, path
        csp = response.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert response.headers["x-frame-options"] == "DENY"
        html = response.text
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
        assert scripts and all('src="/static/' in attrs and not body.strip()
                               for attrs, body in scripts), path
        assert "<style" not in html and " style=" not in html, path
        assert not re.search(r"<[^>]+\son[a-z]+=", html), path  # no inline handler either


def test_the_session_cookie_is_httponly_and_samesite_strict(civ: Path) -> None:
    client = TestClient(make_app(civ))
    response = client.post("/login", data={"token": auth.load_token()}, follow_redirects=False)
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Secure" not in cookie  # loopback http: see auth.cookie_header
    assert auth.load_token() not in cookie


def test_markup_a_task_or_a_model_wrote_shows_as_text(civ: Path) -> None:
    number = wake()  # the model's reply says INJECTED
    tasks = TaskQueue(paths.home("opus").tasks)
    tasks.claim(tasks.add(f"Read {INJECTED} aloud").id)  # the current task, on the first page
    client = logged_in(civ)
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    for path in (f"/wakes/opus/{number}", "/"):
        page = client.get(path).text
        assert INJECTED not in page and escaped in page, path


def test_a_quarantined_mails_subject_shows_as_text_and_bounded(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The broker's mail state records no Subject yet (citizen/broker/mailstate.py): a
    # record that holds one stands in for it, as the view would hand it over.
    subject = f"Re: invoice {INJECTED}<img src=x onerror=alert(2)>\u202e" + "x" * 500
    row = {"citizen": "opus", "ts": "2026-01-02T03:04:05+00:00", "message_id": "<q@x>",
           "from": "stranger@example.com", "reason": "not an operator", "subject": subject}
    monkeypatch.setattr(mailstate, "quarantined_readonly", lambda _dir, _limit: ([row], False))
    page = logged_in(civ).get("/decisions").text
    cell = re.search(r'<td data-label="Subject" class="subject">(.*?)</td>', page, re.S)
    assert cell, "the quarantine shows no Subject"
    shown = cell.group(1)
    assert shown.startswith("Re: invoice &lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x")
    assert "<" not in shown and "\u202e" not in shown  # text, and no reordering of it
    assert len(html.unescape(shown)) == decisions.SUBJECT_CHARS and shown.endswith("\u2026")


def test_a_key_in_a_wake_log_is_redacted_from_the_page(civ: Path) -> None:
    key = "sk-ant-api03-" + "A1b2C3d4" * 6
    number = wake(text=f"my key is {key}")
    client = logged_in(civ)
    page = client.get(f"/wakes/opus/{number}").text
    assert key not in page and "[redacted]" in page
    assert auth.load_token() not in page


def test_the_wake_page_lists_the_tool_calls_citizen_logs_prints(civ: Path) -> None:
    number = wake()
    out = CliRunner().invoke(cli, ["logs", "opus", "--wake", str(number)]).output
    cli_calls = [(m.group(1), json.loads(m.group(2))) for m in
                 re.finditer(r"^\S+ +tool (\S+) (\{.*\})$", out, re.M)]
    assert [name for name, _ in cli_calls] == ["write_file", "read_file", "task_complete"]
    page = logged_in(civ).get(f"/wakes/opus/{number}").text
    page_calls = [(m.group(1), json.loads(_unescape(m.group(2)))) for m in re.finditer(
        r'<code class="tool">([^<]+)</code>.*?<pre class="args">(.*?)</pre>', page, re.S)]
    assert page_calls == cli_calls


def _unescape(html: str) -> str:
    return (html.replace("&#34;", '"').replace("&#39;", "'").replace("&lt;", "<")
            .replace("&gt;", ">").replace("&amp;", "&"))


def test_the_timeline_filters_and_pages(civ: Path) -> None:
    first, second = wake(), wake()
    client = logged_in(civ)
    page = client.get("/wakes/opus").text
    assert f'href="/wakes/opus/{second}"' in page and f'href="/wakes/opus/{first}"' in page
    assert page.index(f"/wakes/opus/{second}\"") < page.index(f"/wakes/opus/{first}\"")
    none = client.get("/wakes/opus?type=REFLECT").text
    assert "/wakes/opus/1\"" not in none and "No wakes match" in none
    paged = client.get("/wakes/opus?status=ok&page=9").text  # past the end: the last page
    assert "page 1 of 1" in paged
    assert client.get("/wakes/nobody").status_code == 404
    assert client.get("/wakes/opus/99").status_code == 404


def test_citizen_web_token_prints_the_token_kept_0600(civ: Path) -> None:
    first = CliRunner().invoke(cli, ["web", "--token"])
    assert first.exit_code == 0, first.output
    path = civ / ".web" / "token"
    assert first.output.strip() == auth.load_token() and len(first.output.strip()) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().startswith("# ")  # why the file is there, for whoever finds it
    again = CliRunner().invoke(cli, ["web", "--token"])
    assert again.output == first.output


def test_only_loopback_listens_without_a_warning() -> None:
    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("192.168.1.5")
    assert not _loopback("example.org")


@pytest.mark.parametrize(("spent", "cap", "level"), [
    (0.5, 10.0, "ok"), (8.5, 10.0, "amber"), (10.0, 10.0, "over"), (3.0, None, "ok")])
def test_money_turns_amber_past_80_percent(spent: float, cap: float | None,
                                            level: str) -> None:
    assert civilization.level(spent, cap) == level


def test_the_burn_rate_is_the_last_hour_carried_to_midnight(civ: Path) -> None:
    home = paths.home("opus")
    now = datetime.now(UTC).replace(hour=18, minute=0, second=0, microsecond=0)
    ledger = spend.ledger(home, now.date())
    ledger.parent.mkdir(parents=True, exist_ok=True)
    lines = [(now - timedelta(hours=3), 2.0), (now - timedelta(minutes=30), 0.5)]
    ledger.write_text("".join(json.dumps({"ts": t.isoformat(), "cost_usd": c}) + "\n"
                              for t, c in lines))
    money = civilization.money(home, 2.5, 5.0, now=now)
    assert money["usd_last_hour"] == 0.5
    assert money["usd_projected"] == pytest.approx(2.5 + 0.5 * 6)
    assert money["level"] == "ok" and money["projected_level"] == "over"


def test_events_send_the_rows_to_a_session(civ: Path) -> None:
    with logged_in(civ).stream("GET", "/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        got = ""
        for chunk in response.iter_text():
            got += chunk
            if "</tr>" in got:
                break
    assert "event: rows" in got and 'href="/wakes/opus"' in got


def test_the_watchers_record_the_last_word_of_a_room_once(civ: Path) -> None:
    """Seen and hidden quickly, twice: the marks are serialised and each says what the
    open pages say now; two pages of one room make one watch; a failed mark is retried
    by the next change."""
    import asyncio
    import threading

    from citizen.web.presence import Watchers
    from shared.errors import NotAllowed

    marks: list[tuple[str, bool]] = []
    gate = threading.Event()
    fail = [False]

    def mark(room: str, present: bool) -> None:
        gate.wait(5)  # a slow helper: the page is hidden before the first mark is done
        if fail[0]:
            raise NotAllowed("the helper does not answer")
        marks.append((room, present))

    async def scene() -> None:
        w = Watchers(mark)
        first = asyncio.create_task(w.join("general"))
        await asyncio.sleep(0)
        second = asyncio.create_task(w.join("general"))  # a second tab on the same room
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, second)
        assert marks == [("general", True)] and w.watching("general") == 2
        await w.leave("general")
        assert marks == [("general", True)]  # one tab still shows it
        fail[0] = True
        await w.leave("general")  # the mark fails: nothing recorded as done
        fail[0] = False
        await w.join("general")  # still marked present: no second "present"
        assert marks == [("general", True)]
        await w.leave("general")
        assert marks == [("general", True), ("general", False)]

    asyncio.run(scene())


def test_a_room_page_is_served_only_for_a_known_room(civ: Path) -> None:
    from citizen import civilization as handles

    client = logged_in(civ)
    assert client.get("/decisions/rooms/general").status_code == 200
    for name in ("nosuch", "..%2F..%2Fetc", "GENERAL"):
        assert client.get(f"/decisions/rooms/{name}").status_code == 404, name
        assert client.get(f"/decisions/rooms/{name}/presence").status_code == 404, name
    assert not list(handles.streams().rooms.dir.glob("*.json"))  # nothing made
