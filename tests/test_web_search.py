"""web_search against a local server speaking SearXNG's JSON API (issue 30): the backend is
the operator's `web.search_url`, never the process environment or a citizen's own file on
a server; results are few and short; failures are the tool's; `citizen doctor` checks it."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from citizen import config
from citizen.cli import cli
from citizen.config import paths
from citizen.errors import ConfigError
from citizen.tools import ToolFailure, core_tools
from citizen.wake.flow import run_wake
from tests.anthropic_server import API_KEY, MessagesServer, text
from tests.scripts import Actor, call, queue, tool_env


@dataclass
class Searx:
    """A SearXNG instance as its JSON API answers: `GET /search?q=...&format=json`."""

    port: int = 0
    queries: list[dict[str, list[str]]] = field(default_factory=list)
    status: int = 200
    results: list[dict[str, Any]] = field(default_factory=lambda: [
        {"url": "https://en.wikipedia.org/wiki/Lighthouse", "title": "Lighthouse - Wikipedia",
         "content": "A lighthouse is a tower designed to emit light.", "engine": "wikipedia",
         "engines": ["wikipedia"], "score": 3.0, "category": "general"},
        {"url": "https://example.org/pharos", "title": "The Pharos of Alexandria",
         "content": "One of the Seven Wonders.", "engine": "duckduckgo", "score": 1.0}])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/search"

    def answer(self, path: str) -> tuple[int, bytes]:
        parts = urllib.parse.urlsplit(path)
        query = urllib.parse.parse_qs(parts.query)
        self.queries.append(query)
        if parts.path != "/search":
            return 404, b"not found"
        if query.get("format") != ["json"]:
            return 403, b"Forbidden"  # SearXNG without `json` in search.formats
        if self.status != 200:
            return self.status, b"<html>Internal Server Error</html>"
        return 200, json.dumps({
            "query": query["q"][0], "number_of_results": len(self.results),
            "results": self.results, "answers": [], "corrections": [], "infoboxes": [],
            "suggestions": [], "unresponsive_engines": []}).encode()


@pytest.fixture
def searx() -> Iterator[Searx]:
    state = Searx()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            status, body = state.answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if status == 200 else
                             "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def operator_sets(rules_dir: Path, **web: str) -> None:
    (rules_dir / "opus.json").write_text(json.dumps(
        {"permissions": {"can_use_network": True}, **({"web": web} if web else {})}))


def searching_wake() -> tuple[Actor, list[str]]:
    """A task wake whose model searches, and the tools it was offered."""
    queue().add("Find out what a lighthouse is")
    actor = Actor(call("web_search", query="lighthouse"),
                  call("task_complete", summary="a lighthouse is a tower that emits light"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status in ("ok", "failed"), result.reason
    offered = [r.output_schema["properties"]["tools"]["items"]["enum"]  # type: ignore[index]
               for r in actor.requests if r.purpose == "select_tools"]
    assert len(offered) == 1
    return actor, offered[0]


def test_a_configured_search_returns_the_results(civ: Path, rules_dir: Path, searx: Searx) -> None:
    operator_sets(rules_dir, search_url=searx.url)
    actor, offered = searching_wake()
    assert "web_search" in offered
    assert searx.queries == [{"q": ["lighthouse"], "format": ["json"]}]
    seen = json.dumps([r.messages for r in actor.requests if r.purpose != "select_tools"])
    for expected in ("Lighthouse - Wikipedia", "https://en.wikipedia.org/wiki/Lighthouse",
                     "A lighthouse is a tower designed to emit light.",
                     "The Pharos of Alexandria"):
        assert expected in seen
    assert "duckduckgo" not in seen  # title, url and snippet only


def test_results_are_few_and_short(civ: Path, rules_dir: Path, searx: Searx) -> None:
    from citizen.tools.web import FIELD_CHARS, MAX_RESULTS  # new in issue 30: imported here

    operator_sets(rules_dir, search_url=searx.url)
    searx.results = [{"url": f"https://example.org/{i}", "title": "t" * 1000,
                      "content": "c" * 5000} for i in range(40)]
    out = json.loads(core_tools(search=True)["web_search"].run(tool_env("opus"),
                                                               {"query": "anything"}))
    assert len(out) == MAX_RESULTS
    assert all(set(r) == {"title", "url", "snippet"} for r in out)
    assert len(out[0]["title"]) == FIELD_CHARS["title"]
    assert len(out[0]["snippet"]) == FIELD_CHARS["snippet"]


def test_the_process_environment_configures_no_search(
        civ: Path, rules_dir: Path, searx: Searx, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unconfigured citizen is not offered web_search, whatever its environment says:
    the backend's host is reachable even when private, so only the operator names it."""
    operator_sets(rules_dir)  # networked, no backend
    monkeypatch.setenv("EXPERIENCE_SEARCH_URL", searx.url)  # the old way in
    _, offered = searching_wake()
    assert "web_search" not in offered and "web_fetch" in offered
    assert searx.queries == []


def test_on_a_server_the_citizens_own_config_sets_no_search_url(
        civ: Path, rules_dir: Path, searx: Searx, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: point web_search at a private service through one's own config.json."""
    operator_sets(rules_dir)
    paths.citizen_config_file("opus").write_text(json.dumps({"web": {"search_url": searx.url}}))
    assert config.load_citizen("opus").web.search_url == searx.url  # dev mode: its own rules
    monkeypatch.setattr(config.loading, "_commons_owned", lambda _shared: True)  # server mode
    assert config.load_citizen("opus").web.search_url == ""
    _, offered = searching_wake()
    assert "web_search" not in offered
    with pytest.raises(ToolFailure, match="no search backend is configured") as info:
        core_tools(search=True)["web_search"].run(tool_env("opus"), {"query": "x"})
    assert str(rules_dir / "opus.json") in str(info.value)  # names the operator's file
    assert searx.queries == []


def test_a_server_error_is_a_clear_tool_failure(civ: Path, rules_dir: Path, searx: Searx) -> None:
    operator_sets(rules_dir, search_url=searx.url)
    searx.status = 500
    with pytest.raises(ToolFailure, match=r"the search backend \(web.search_url\) failed: .*500"):
        core_tools(search=True)["web_search"].run(tool_env("opus"), {"query": "x"})


def test_the_schema_takes_only_one_http_url_with_a_host(civ: Path, rules_dir: Path) -> None:
    for bad in ("ftp://search.example/", "http://", "http://a/search?q=", "searx.local",
                "http://user:pw@search.example/"):
        operator_sets(rules_dir, search_url=bad)
        with pytest.raises(ConfigError, match=r"web\.search_url"):
            config.load_citizen("opus")


def doctor_says(messages_api: MessagesServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_api.url)
    messages_api.reply(text("ready", input_tokens=12, output_tokens=2))
    result = CliRunner().invoke(cli, ["doctor", "--json", "--citizen", "opus"])
    checks = {c["name"]: c for c in json.loads(result.output)["checks"]}
    assert "search" in checks, result.output
    return {"status": checks["search"]["status"], "detail": checks["search"]["detail"]}


def test_doctor_reports_each_state_of_the_search_backend(
        civ: Path, rules_dir: Path, searx: Searx, messages_api: MessagesServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    unset = doctor_says(messages_api, monkeypatch)
    assert unset["status"] == "ok" and "web.search_url" in unset["detail"]
    assert str(rules_dir / "opus.json") in unset["detail"]  # where to set it

    operator_sets(rules_dir, search_url=searx.url)
    answering = doctor_says(messages_api, monkeypatch)
    assert answering == {"status": "ok",
                         "detail": f"{searx.url} answers (2 results for a test query)"}

    searx.status = 500
    failing = doctor_says(messages_api, monkeypatch)
    assert failing["status"] == "FAIL" and "500" in failing["detail"]
    assert f"correct web.search_url in {rules_dir / 'opus.json'}" in failing["detail"]

    (rules_dir / "opus.json").write_text(json.dumps({"web": {"search_url": searx.url}}))
    offline = doctor_says(messages_api, monkeypatch)
    assert offline["status"] == "FAIL" and "permissions.can_use_network" in offline["detail"]
