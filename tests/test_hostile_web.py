"""The web tools against a hostile citizen (issue 28): no network without the operator's
permission, never the machine's own addresses, the search backend on its one port."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
from collections import namedtuple
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from citizen.config import WebSettings, paths
from citizen.tools import ToolFailure, core_tools
from citizen.tools.base import ToolEnv
from tests.scripts import tool_env
from tests.test_tools import networked

Addr = namedtuple("Addr", "family address netmask broadcast ptp")
OWN_PUBLIC = "93.184.215.14"  # a global address, made this machine's own below


@pytest.fixture
def env(civ: Path) -> ToolEnv:
    return networked(tool_env("opus"))


@pytest.fixture
def server() -> Iterator[tuple[int, list[str]]]:
    hits: list[str] = []

    class Inside(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"results": [{"title": "t", "url": "u",
                                                      "content": "inside"}]}).encode())

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Inside)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield httpd.server_address[1], hits
    httpd.shutdown()
    httpd.server_close()


def searching(env: ToolEnv, port: int) -> ToolEnv:
    """`env` with the operator's search backend at 127.0.0.1:`port`."""
    env.config = dataclasses.replace(
        env.config, web=WebSettings(search_url=f"http://127.0.0.1:{port}/search"))
    return env


def _search(env: ToolEnv, args: dict[str, str]) -> str:
    return core_tools(search=True)["web_search"].run(env, args)


def test_without_can_use_network_the_web_tools_refuse(
        civ: Path, server: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    port, hits = server
    monkeypatch.setenv("EXPERIENCE_WEB_ALLOW", "127.0.0.1")  # even a host the operator opens
    env = searching(tool_env("opus"), port)  # the templates grant no network
    attempts: tuple[Callable[[], str], ...] = (
        lambda: core_tools()["web_fetch"].run(env, {"url": f"http://127.0.0.1:{port}/"}),
        lambda: _search(env, {"query": "x"}))
    for run in attempts:
        with pytest.raises(ToolFailure, match="can_use_network") as info:
            run()
        assert str(paths.citizen_config_file("opus")) in str(info.value)
    assert hits == []


def test_the_machines_own_public_address_is_refused(
        env: ToolEnv, server: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's public address reaches its services as loopback would: every address
    of its interfaces is refused, before any connection."""
    real = psutil.net_if_addrs()
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {
        **real, "eth9": [Addr(socket.AF_INET, OWN_PUBLIC, "255.255.255.0", None, None)]})
    port, hits = server
    with pytest.raises(ToolFailure, match="an address of this machine"):
        core_tools()["web_fetch"].run(env, {"url": f"http://{OWN_PUBLIC}:{port}/admin"})
    assert hits == []


def test_the_search_backend_is_open_on_its_one_port_to_web_search_alone(
        env: ToolEnv, server: tuple[int, list[str]]) -> None:
    port, hits = server
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other_port = other.getsockname()[1]
    other.close()
    assert "inside" in _search(searching(env, port), {"query": "lighthouse"})
    assert hits and hits[0].startswith("/search?")
    for url in (f"http://127.0.0.1:{other_port}/", f"http://127.0.0.1:{port}/admin"):
        with pytest.raises(ToolFailure, match="not a public address"):
            core_tools()["web_fetch"].run(env, {"url": url})
    assert len(hits) == 1
