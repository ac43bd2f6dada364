"""The Wakes page's parts beyond the transcript (issue 32, item 2): the live tail of a wake
in progress (server-sent events from a byte offset of its log, as `citizen logs --follow`),
a prompt's system blocks on demand (only a key a prompt of that wake names; a key is data,
never a path), and ages ("3 min ago") with the exact time in a title on every page."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape
from starlette.testclient import TestClient

from citizen.config import paths
from citizen.home import wakelog
from citizen.home.wakelog import WakeLog
from citizen.web.facts import wakes
from tests.test_web_app import logged_in, wake


def _log(name: str, number: int, *events: dict[str, Any]) -> Path:
    """A wake log of `name` written by hand, event by event (a wake in progress)."""
    path = paths.home(name).wake_logs / f"{number:06d}-TASK.jsonl"
    with path.open("a") as fh:
        fh.writelines(json.dumps({"wake": number, **e}) + "\n" for e in events)
    return path


START = {"ts": "2026-11-25T10:00:00+00:00", "event": "wake_start", "type": "TASK",
         "reason": "requested", "pid": 1}
TOOL = {"ts": "2026-11-25T10:00:01+00:00", "event": "tool_call", "tool": "read_file",
        "args": {"path": "notes/tail.md"}, "result": "tail"}
END = {"ts": "2026-11-25T10:00:02+00:00", "event": "wake_end", "status": "ok", "reason": "",
       "cost_usd": 0.0, "calls": 0, "duration_s": 2.0}


def _stream(client: TestClient, url: str, **headers: str) -> str:
    """The whole event stream at `url` (it ends by itself once the wake has ended)."""
    got = ""
    with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for chunk in response.iter_text():
            got += chunk
    return got


def test_the_page_of_a_wake_in_progress_tails_it_from_the_offset_it_showed(civ: Path) -> None:
    log = _log("mira", 3, START)
    client = logged_in(civ)
    page = client.get("/wakes/mira/3").text
    tail = re.search(r'data-tail="(/wakes/mira/3/events\?offset=(\d+))"', page)
    assert tail, "a wake in progress has a live tail"
    assert int(tail.group(2)) == log.stat().st_size  # what the page shows, no more
    assert 'src="/static/tail.js"' in page and "running" in page
    _log("mira", 3, TOOL, END)  # written after the page: the tail brings them
    got = _stream(client, html.unescape(tail.group(1)))
    events, end = got.split("event: end")
    assert "notes/tail.md" in events and 'class="event event-tool_call"' in events
    assert "wake_start" not in events  # before the offset: not sent again
    assert f"id: {log.stat().st_size}" in events  # a reconnect goes on from there
    assert 'id="summary"' in end and "ok" in end  # the final status for the page
    assert "data-tail" not in client.get("/wakes/mira/3").text  # ended: no tail


def test_a_reconnect_resumes_from_the_last_event_id_and_bad_offsets_are_refused(
        civ: Path) -> None:
    _log("mira", 3, START, TOOL)
    resume = _log("mira", 3, END).stat().st_size - len(json.dumps({"wake": 3, **END})) - 1
    client = logged_in(civ)
    got = _stream(client, "/wakes/mira/3/events?offset=0", **{"last-event-id": str(resume)})
    assert "notes/tail.md" not in got and "event: end" in got
    assert client.get("/wakes/mira/3/events?offset=-1").status_code == 400
    assert client.get("/wakes/mira/3/events?offset=x").status_code == 400
    assert client.get("/wakes/mira/9/events").status_code == 404
    assert client.get("/wakes/nobody/3/events").status_code == 404


def test_an_ended_wake_has_no_live_tail(civ: Path) -> None:
    number = wake()
    page = logged_in(civ).get(f"/wakes/opus/{number}").text
    assert "data-tail" not in page and "tail.js" not in page


def test_a_block_of_the_wake_is_shown_on_demand(civ: Path) -> None:
    number = wake()
    client = logged_in(civ)
    page = client.get(f"/wakes/opus/{number}").text
    keys = re.findall(rf'class="block" href="/wakes/opus/{number}/blocks/([0-9a-f]+)"', page)
    assert keys, "the prompt's blocks are links"
    shown = client.get(f"/wakes/opus/{number}/blocks/{keys[0]}")
    assert shown.status_code == 200
    text = WakeLog.read_blob(paths.home("opus"), keys[0])
    assert len(text) > 100 and str(escape(text)) in shown.text


def test_a_block_not_named_by_the_wake_or_shaped_as_a_path_is_404_and_read_nothing(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    number = wake()
    home = paths.home("opus")
    hidden = "never on the page"
    other_citizen = WakeLog(paths.home("mira"), 1, "TASK").blob(f"mira's block: {hidden}")
    other_wake = WakeLog(home, number + 1, "TASK").blob(f"another wake's block: {hidden}")
    blobs = home.wake_logs.parent / "blobs"
    (blobs / "x.txt").write_text(hidden)  # where the key "x" would lead
    (blobs.parent.parent / "x.txt").write_text(hidden)  # and "../../x": opus's home
    # A log may name anything (the citizen wrote it): a key it names is still only a blob key.
    with wakelog.wake_logs(home)[-1].open("a") as fh:
        fh.write(json.dumps({"event": "prompt", "wake": number,
                             "system_blobs": ["../../x", "x"]}) + "\n")
    read: list[str] = []
    real = WakeLog.read_blob

    def spy(h: paths.Home, key: str) -> str:
        read.append(key)
        return real(h, key)

    monkeypatch.setattr(WakeLog, "read_blob", staticmethod(spy))
    client = logged_in(civ)
    for key in (other_citizen, other_wake, "..%2F..%2Fx", "%2E%2E", "y"):
        refused = client.get(f"/wakes/opus/{number}/blocks/{key}")
        assert refused.status_code == 404, key
        assert hidden not in refused.text
    assert read == []  # no key the wake does not name reached the blob store
    named = client.get(f"/wakes/opus/{number}/blocks/x")
    assert named.status_code == 404 and hidden not in named.text
    with pytest.raises(wakes.NoSuchWake):
        wakes.block("opus", number, "../../x")


def test_pages_show_ages_with_the_exact_time_in_a_title(civ: Path) -> None:
    started = (datetime.now(UTC) - timedelta(minutes=3, seconds=10)).isoformat()
    _log("mira", 3, {**START, "ts": started}, {**END, "ts": started})
    client = logged_in(civ)
    for path in ("/wakes/mira", "/wakes/mira/3", "/"):
        page = client.get(path).text
        assert f'title="{started}">3 min ago</time>' in page, path
