"""The dev-mode broker follows the environment it is asked from (issue 43, 4a).

A dev-mode broker reads the upstream and keys from the environment it was started in
and stays for its idle minutes; a caller that set another ANTHROPIC_BASE_URL was sent to
the old one ("HTTP 502 ... cannot reach the upstream 127.0.0.1:<the old port>"), and the
failure was called the Anthropic API's. Real brokers, real SDK, real local servers.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from citizen import config
from citizen.access import client
from citizen.config import paths
from citizen.errors import ProviderError
from citizen.llm import make_provider
from citizen.llm.base import Request
from tests.anthropic_server import API_KEY, MessagesServer, text
from tests.daemons import wait_for

pytestmark = pytest.mark.usefixtures("civ")


def ask() -> Any:
    llm = make_provider(config.load_citizen("opus"), config.load_secrets("opus"))
    return llm.complete(Request(system=("You are opus.",), max_tokens=50,
                                messages=({"role": "user", "content": "Say hi"},),
                                purpose="test"))


def broker_pid() -> int:
    return int((paths.broker_state() / "broker.pid").read_text(encoding="utf-8"))


def closed_port() -> int:
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_second_base_url_is_followed_by_the_dev_broker(
        civ: Path, messages_api: MessagesServer, monkeypatch: pytest.MonkeyPatch) -> None:
    (civ / "opus" / ".env").write_text(f"ANTHROPIC_API_KEY={API_KEY}\n")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_api.url)
    messages_api.responder = lambda _body: text("from the first")
    assert ask().text == "from the first"
    first = broker_pid()
    assert ask().text == "from the first"
    assert broker_pid() == first  # the same environment keeps its broker

    messages_api.stop()  # the developer's first stand-in is gone, a second one answers
    second = MessagesServer().start()
    try:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", second.url)
        second.responder = lambda _body: text("from the second")
        assert ask().text == "from the second"
        assert len(second.forwarded()) == 1
        assert broker_pid() != first
    finally:
        second.stop()


def test_an_unreachable_upstream_is_named_as_the_brokers(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (civ / "opus" / ".env").write_text(f"ANTHROPIC_API_KEY={API_KEY}\n")
    port = closed_port()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(ProviderError) as caught:
        ask()
    message = str(caught.value)
    assert "the broker cannot reach its upstream" in message
    assert f"127.0.0.1:{port}" in message
    assert "Anthropic API" not in message


def test_a_process_whose_leader_exited_is_alive_while_a_thread_runs() -> None:
    """A killed broker's leader is a zombie before its other threads are gone - and until
    then its socket listens and its ledger's lock is held: the next broker must wait (a
    caller was handed the old socket and found it refused, CI on 2026-11-28)."""
    leader_exits = ("import ctypes, threading, time\n"
                    "threading.Thread(target=time.sleep, args=(30,)).start()\n"
                    "ctypes.CDLL(None).syscall(60, 0)\n")  # SYS_exit: this thread alone
    proc = subprocess.Popen([sys.executable, "-c", leader_exits])
    try:
        stat = Path(f"/proc/{proc.pid}/stat")
        wait_for(lambda: stat.read_text().rpartition(")")[2].split()[0] == "Z")
        assert client._alive(proc.pid)  # the leader is a zombie; a thread still runs
    finally:
        proc.kill()
        proc.wait()
    assert not client._alive(proc.pid)
