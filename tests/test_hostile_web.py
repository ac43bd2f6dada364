"""The web tools against a hostile citizen (issue 28): no network without the operator's
permission, never the machine's own addresses, the search backend on its one port; a
private host opens only by the operator's `web.allow` (issue 30)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import threading
from collections import namedtuple
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from citizen import config
from citizen.config import WebSettings, paths
from citizen.errors import ConfigError
from citizen.tools import ToolFailure, core_tools
from citizen.tools.base import ToolEnv
from tests.scripts import tool_env
from tests.test_tools import networked, opening

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
        civ: Path, server: tuple[int, list[str]]) -> None:
    port, hits = server
    # The templates grant no network; even a host the operator opens stays shut.
    env = searching(opening(tool_env("opus"), "127.0.0.1"), port)
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


def test_only_the_operators_file_opens_a_private_host(
        civ: Path, rules_dir: Path, server: tuple[int, list[str]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: a citizen opens its own machine's services to web_fetch by every place
    it writes - the process environment (its daemon sets its wakes' own), its
    ~/code/templates, its config.json on a server. Each is refused; the operator's
    /etc/experience/<name>.json opens the host, and the refusal names that file."""
    port, hits = server
    url = f"http://127.0.0.1:{port}/admin"
    (rules_dir / "opus.json").write_text(json.dumps({"permissions": {"can_use_network": True}}))
    monkeypatch.setenv("EXPERIENCE_WEB_ALLOW", "127.0.0.1")  # the way in before issue 30
    code, release = tmp_path / "code-templates", tmp_path / "release-templates"
    shutil.copytree(paths.templates_dir(), code)
    shutil.copytree(paths.templates_dir(), release)
    configs = json.loads((code / "citizen_configs.json").read_text())
    configs["defaults"]["web"]["allow"] = ["127.0.0.1", "localhost"]
    (code / "citizen_configs.json").write_text(json.dumps(configs))
    monkeypatch.setenv("EXPERIENCE_TEMPLATES", str(code))  # its own ~/code's templates
    monkeypatch.setenv("EXPERIENCE_RULES_DIR", str(release))  # the unit's: the release
    paths.citizen_config_file("opus").write_text(json.dumps({"web": {"allow": ["127.0.0.1"]}}))
    monkeypatch.setattr(config.loading, "_commons_owned", lambda _shared: True)  # a server
    fetch = core_tools()["web_fetch"]
    with pytest.raises(ToolFailure, match="not a public address") as info:
        fetch.run(tool_env("opus"), {"url": url})
    assert f"web.allow of {rules_dir / 'opus.json'}" in str(info.value)  # where to open it
    assert hits == []

    (rules_dir / "opus.json").write_text(json.dumps(
        {"permissions": {"can_use_network": True}, "web": {"allow": [" 127.0.0.1 "]}}))
    assert json.loads(fetch.run(tool_env("opus"), {"url": url}))["results"]
    assert hits == ["/admin"]


def test_the_allow_list_takes_hosts_only(civ: Path, rules_dir: Path) -> None:
    (rules_dir / "opus.json").write_text(json.dumps(
        {"web": {"allow": ["Searx.Internal", "10.0.0.5", "::1"]}}))
    assert config.load_citizen("opus").web.allow == ("searx.internal", "10.0.0.5", "::1")
    for bad in (["http://10.0.0.1/"], ["10.0.0.1:8080"], ["a,b"], "127.0.0.1", ["x/y"]):
        (rules_dir / "opus.json").write_text(json.dumps({"web": {"allow": bad}}))
        with pytest.raises(ConfigError, match=r"web"):
            config.load_citizen("opus")
