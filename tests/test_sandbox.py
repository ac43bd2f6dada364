"""shell_command runs in bubblewrap: each attack below works on an unconfined shell (the
first test shows it, with the development override) and fails in the sandbox."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from citizen import config
from citizen.config import paths
from citizen.home.contexts import ContextStore
from citizen.home.memory import Memory
from citizen.home.tasks import TaskQueue
from citizen.llm.base import estimate_tokens
from citizen.tools import ToolFailure, core_tools, sandbox
from citizen.tools.base import ToolEnv
from tests.daemons import wait_for

CANARY = "canary-7f3e9b"
pytestmark = pytest.mark.skipif(sandbox.bwrap() is None, reason="bubblewrap is not installed")

ATTACKS = {
    "the secrets file": "cat .env",
    "a hard link to it": "ln .env stolen 2>/dev/null; cat stolen",
    "the daemon's environment": "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep KEY",
    "a peer's home": "cat {root}/mira/.env; cat {root}/mira/notes.md",
    "the contexts": "cat contexts/*",
}


@pytest.fixture
def env(civ: Path) -> Iterator[ToolEnv]:
    # A process holding the key in its environment, as systemd's EnvironmentFile gives the
    # daemon: visible in /proc/<pid>/environ to anything of the same user.
    holder = subprocess.Popen(["sleep", "120"], env={**os.environ, "ANTHROPIC_API_KEY": CANARY})
    for name in ("opus", "mira"):
        home = paths.home(name)
        with home.env.open("a") as f:
            f.write(f"ANTHROPIC_API_KEY={CANARY}-{name}\n")
        (home.contexts).mkdir(exist_ok=True)
        (home.contexts / "canary.txt").write_text(CANARY)
    (paths.home("mira").dir / "notes.md").write_text(f"mira's own {CANARY}")
    home = paths.home("opus")
    cfg = config.load_citizen("opus")
    contexts = ContextStore(home.contexts, cfg.context_limits, estimate_tokens).load_all()
    yield ToolEnv(home, cfg, config.load_secrets("opus"), TaskQueue(home.tasks),
                  Memory(home.memory), contexts)
    holder.kill()
    holder.wait()


def run(env: ToolEnv, command: str, timeout: int = 30) -> str:
    return core_tools()["shell_command"].run(env, {"command": command, "timeout": timeout})


def test_the_attacks_work_unconfined(env: ToolEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test below proves something: without the sandbox, each attack gets the canary."""
    monkeypatch.setenv(sandbox.MODE_ENV, "off")
    root = paths.civ_root()
    for what, command in ATTACKS.items():
        assert CANARY in run(env, command.format(root=root)), what


def test_no_attack_reaches_a_secret_in_the_sandbox(env: ToolEnv) -> None:
    root = paths.civ_root()
    for what, command in ATTACKS.items():
        out = run(env, command.format(root=root))
        assert CANARY not in out, f"{what}: {out}"
    # What the work needs still works: the home is the working directory and writable,
    # but for what the daemon reads (test_sandbox_peer.py).
    assert "exit code 0" in run(env, "echo hi > notes.txt && cat notes.txt")
    assert (paths.home("opus").dir / "notes.txt").read_text() == "hi\n"
    assert "Read-only file system" in run(env, "echo x > config.json")
    assert "Read-only file system" in run(env, "echo x > .gitconfig")
    assert "Read-only file system" in run(env, "touch /usr/evil")


def test_nothing_outlives_the_call_and_there_is_no_network(env: ToolEnv) -> None:
    run(env, "setsid sleep 417 & nohup sleep 418 >/dev/null 2>&1 & echo started")
    def left() -> list[list[str]]:
        return [p.info["cmdline"] for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"]
                and p.info["cmdline"][:2] in (["sleep", "417"], ["sleep", "418"])]
    # Killed with the call, gone once reaped; a survivor would sleep on for 417 s.
    wait_for(lambda: not left(), timeout=10)
    out = run(env, "exec 3<>/dev/tcp/1.1.1.1/80 && echo connected || echo refused", timeout=10)
    assert "refused" in out and "connected" not in out


def test_limits_stop_a_huge_file(env: ToolEnv) -> None:
    out = run(env, "head -c 2000000000 /dev/zero > work/big; echo rc=$?; ls -l work/big")
    assert "rc=0" not in out
    assert (paths.home("opus").dir / "work" / "big").stat().st_size <= sandbox.Limits().file_size


def test_without_bubblewrap_commands_are_refused_when_required(
        env: ToolEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)  # the module sandbox calls
    monkeypatch.setenv(sandbox.MODE_ENV, "required")
    with pytest.raises(ToolFailure, match=r"bubblewrap is not installed.*refused"):
        run(env, "echo hi")
    # auto (the default while the unit forbids namespaces): runs, unconfined, and says so
    monkeypatch.setenv(sandbox.MODE_ENV, "auto")
    sandbox._warn_once.cache_clear()
    assert "hi" in run(env, "echo hi")
    assert "UNCONFINED" in caplog.text


def test_no_host_unix_socket_is_reachable(env: ToolEnv, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """The helper's observation: `--ro-bind / /` does not stop connect() to a service's
    Unix socket (the system bus, Dovecot's auth socket live under /run)."""
    folder = Path("/run") / f"experience-test-{os.getpid()}"
    folder.mkdir(mode=0o755)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(folder / "service.sock"))
        os.chmod(folder / "service.sock", 0o777)  # noqa: S103 - anyone may connect, as a bus
        server.listen(1)
        probe = (f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                 f"s.connect('{folder}/service.sock')\" && echo reached || echo unreachable")
        with monkeypatch.context() as unconfined:
            unconfined.setenv(sandbox.MODE_ENV, "off")
            assert "reached" in run(env, probe)  # the attack works unconfined
        assert "unreachable" in run(env, probe)
    finally:
        server.close()
        shutil.rmtree(folder)
