"""Core tools: schemas from signatures; shell isolation; file tool boundaries."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Literal

import pytest

from citizen import config
from citizen.config import paths
from citizen.home.contexts import ContextStore
from citizen.home.memory import Memory
from citizen.home.tasks import TaskQueue
from citizen.llm.base import estimate_tokens
from citizen.tools import ToolFailure, core_tools, tool
from citizen.tools.base import ToolEnv


@pytest.fixture
def env(civ: Path) -> ToolEnv:
    home = paths.home("opus")
    cfg = config.load_citizen("opus")
    contexts = ContextStore(home.contexts, cfg.context_limits, estimate_tokens).load_all()
    return ToolEnv(home, cfg, config.load_secrets("opus"), TaskQueue(home.tasks),
                   Memory(home.memory), contexts)


def networked(env: ToolEnv) -> ToolEnv:
    """`env` with the operator's `permissions.can_use_network` granted."""
    env.config = dataclasses.replace(
        env.config, permissions={**env.config.permissions, "can_use_network": True})
    return env


def opening(env: ToolEnv, *hosts: str) -> ToolEnv:
    """`env` with the operator's `web.allow` opening `hosts` (private though they are)."""
    env.config = dataclasses.replace(
        env.config, web=dataclasses.replace(env.config.web, allow=hosts))
    return env


def test_schema_comes_from_the_signature_and_docstring() -> None:
    @tool
    def sample(env: ToolEnv, path: str, mode: Literal["a", "b"], count: int = 3,
               ratio: float | None = None) -> str:
        """Do a sample thing.

        :param path: where
        :param count: how many
        """
        return ""

    assert sample.name == "sample" and sample.description == "Do a sample thing."
    props = sample.schema["properties"]
    assert props["path"] == {"type": "string", "description": "where"}
    assert props["mode"] == {"enum": ["a", "b"]}
    assert props["count"] == {"type": "integer", "description": "how many", "default": 3}
    assert props["ratio"]["type"] == "number"
    assert sample.schema["required"] == ["path", "mode"]


def test_core_tools_are_registered() -> None:
    names = set(core_tools())
    assert {"shell_command", "read_file", "write_file", "str_replace_file", "memory_search",
            "web_fetch", "task_complete", "task_stuck", "task_progress"} <= names
    assert "web_search" not in names  # offered only when a search backend is configured


def test_web_search_is_offered_when_configured() -> None:
    assert "web_search" in core_tools(search=True)  # the citizen's web.search_url is set


def test_shell_runs_in_the_home_without_secrets(env: ToolEnv,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("EMAIL_PASS", "pw")
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok")
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    out = core_tools()["shell_command"].run(env, {"command": "pwd; env"})
    assert out.startswith("exit code 0") and str(env.home.dir) in out
    for leaked in ("sk-secret", "EMAIL_PASS", "SOME_SERVICE_TOKEN", "NOTIFY_SOCKET"):
        assert leaked not in out


def test_shell_timeout_kills_the_whole_group(env: ToolEnv) -> None:
    started = time.monotonic()
    with pytest.raises(ToolFailure, match="timed out after 1 s"):
        core_tools()["shell_command"].run(
            env, {"command": "sleep 30 & sleep 30; echo never", "timeout": 1})
    assert time.monotonic() - started < 10


def test_long_output_is_clipped(env: ToolEnv) -> None:
    out = core_tools()["shell_command"].run(env, {"command": "yes x | head -c 50000"})
    assert len(out) < 9000 and "characters cut" in out


def test_files_stay_in_the_home_and_env_is_untouchable(env: ToolEnv) -> None:
    tools = core_tools()
    tools["write_file"].run(env, {"path": "notes/a.md", "content": "one two one"})
    assert tools["read_file"].run(env, {"path": "notes/a.md"}) == "one two one"
    with pytest.raises(ToolFailure, match="exactly once"):
        tools["str_replace_file"].run(env, {"path": "notes/a.md", "old": "one", "new": "1"})
    tools["str_replace_file"].run(env, {"path": "notes/a.md", "old": "two", "new": "2"})
    assert (env.home.dir / "notes" / "a.md").read_text() == "one 2 one"
    with pytest.raises(ToolFailure, match="outside your home"):
        tools["write_file"].run(env, {"path": "../mira/x.txt", "content": "x"})
    with pytest.raises(ToolFailure, match="never readable"):
        tools["read_file"].run(env, {"path": ".env"})
    with pytest.raises(ToolFailure, match="never readable"):
        tools["read_file"].run(env, {"path": "../mira/.env"})


def test_memory_search_finds_recorded_wakes(env: ToolEnv) -> None:
    env.memory.record(3, "TASK", "Compared filelock and flock under contention")
    env.memory.record(4, "TASK", "Wrote the README")
    out = core_tools()["memory_search"].run(env, {"query": "flock contention?"})
    assert "filelock" in out and "README" not in out
    assert core_tools()["memory_search"].run(env, {"query": "*** OR ("}) == "no matches"


def test_task_tools_need_an_active_task(env: ToolEnv) -> None:
    with pytest.raises(ToolFailure, match="no active task"):
        core_tools()["task_complete"].run(env, {"summary": "x"})


def test_web_fetch_refuses_other_schemes(env: ToolEnv) -> None:
    with pytest.raises(ToolFailure, match="only http and https"):
        core_tools()["web_fetch"].run(networked(env), {"url": "file:///etc/passwd"})


def test_web_fetch_returns_page_text_within_its_size_cap(env: ToolEnv) -> None:
    opening(networked(env), "127.0.0.1")  # the operator opens this host
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            big = self.path == "/big"
            body = (b"x" * 2_000_000) if big else (
                b"<html><head><style>p{}</style></head><body><h1>Lighthouse</h1>"
                b"<p>keeps the light</p><script>track()</script></body></html>")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain" if big else "text/html")
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        text = core_tools()["web_fetch"].run(env, {"url": f"{url}/page"})
        assert text == "Lighthouse\nkeeps the light"
        big = core_tools()["web_fetch"].run(env, {"url": f"{url}/big"})
        assert len(big) <= 8200  # 500 KB read at most, then clipped for the conversation
        with pytest.raises(ToolFailure, match="could not fetch"):
            core_tools()["web_fetch"].run(env, {"url": f"{url}/missing".replace(
                str(server.server_address[1]), "9")})
    finally:
        server.shutdown()
        server.server_close()


def test_a_commons_refusal_is_an_observation_and_other_errors_are_not(env: ToolEnv) -> None:
    """The loop hands any SharedError (NotFound, NotAllowed, Invalid …) back to the model as
    an error observation - no per-tool wrapper needed - while a bug still surfaces."""
    from citizen.llm.base import ToolCall
    from citizen.wake.loop import _dispatch
    from shared.errors import NotFound

    @tool
    def lookup(env: ToolEnv, what: str) -> str:
        """Look something up.

        :param what: what
        """
        if what == "bug":
            raise KeyError(what)
        raise NotFound(f"no such {what} - see lookup_list")

    tools = {"lookup": lookup}
    call = ToolCall("c1", "lookup", {"what": "thing"})
    assert _dispatch(call, tools, env, {}, "k1") == ("error: no such thing - see lookup_list",
                                                     True)
    with pytest.raises(KeyError):
        _dispatch(ToolCall("c2", "lookup", {"what": "bug"}), tools, env, {}, "k2")


def test_web_fetch_never_reaches_the_machine_or_its_network(env: ToolEnv) -> None:
    """A page or a prompt-injected model asks for the daemon's own machine: refused in
    every spelling, before any connection; a redirect from an allowed host to a
    forbidden one is refused too; the operator's allow-list opens a host."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hits: list[str] = []
    networked(env)

    class Inside(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            hits.append(self.path)
            if self.path == "/hop":
                self.send_response(302)
                self.send_header("Location", f"http://localhost:{port}/secret")
                self.end_headers()
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"internal admin page")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Inside)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    fetch = core_tools()["web_fetch"]
    try:
        for host in ("127.0.0.1", "localhost", "2130706433", "0x7f.1", "0177.0.0.1", "[::1]",
                     "[::ffff:127.0.0.1]", "0.0.0.0", "169.254.169.254", "10.0.0.1",
                     "192.168.1.1", "[fe80::1]", "224.0.0.1"):
            with pytest.raises(ToolFailure, match="not a public address"):
                fetch.run(env, {"url": f"http://{host}:{port}/secret"})
        assert hits == [], f"a refused address was connected to: {hits}"
        opening(env, "127.0.0.1")
        assert fetch.run(env, {"url": f"http://127.0.0.1:{port}/page"}) == "internal admin page"
        with pytest.raises(ToolFailure, match="localhost resolves to"):
            fetch.run(env, {"url": f"http://127.0.0.1:{port}/hop"})
        assert hits == ["/page", "/hop"]  # the redirect's target was never asked
    finally:
        server.shutdown()


def test_a_completed_goal_is_marked_and_archived_when_the_goals_fill_up(env: ToolEnv) -> None:
    """Goals are archived when `status == "completed"` (the seed's archive_completed):
    goal_complete is what writes that status; an ambiguous name changes nothing."""
    tools = core_tools()
    tools["context_add"].run(env, {"context": "goals", "text": "Ship the review gate"})
    tools["context_add"].run(env, {"context": "goals", "text": "Ship the DRY report"})
    with pytest.raises(ToolFailure, match="2 open goals"):
        tools["goal_complete"].run(env, {"goal": "ship", "outcome": "x"})
    assert all(e["status"] == "open" for e in env.contexts["goals"].entries)
    tools["goal_complete"].run(env, {"goal": "review GATE", "outcome": "merged as c-1"})
    goals = env.contexts["goals"]
    assert [e["status"] for e in goals.entries] == ["completed", "open"]
    assert "Ship the review gate (completed)" in goals.render()
    store = ContextStore(env.home.contexts, env.config.context_limits, estimate_tokens)
    goals.cap = 12  # over its (tiny) cap: the strategy runs at save
    store.save_all({"goals": goals})
    archived = (env.home.contexts / "archive" / "goals.jsonl").read_text().splitlines()
    assert len(archived) == 1 and "review gate" in archived[0]
    assert "merged as c-1" in archived[0]
    assert [e["text"] for e in store.load("goals").entries] == ["Ship the DRY report"]
