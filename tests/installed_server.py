"""The installed server tests/server_install/ drives: a handle on the booted
container after setup_server.sh, the hostile shell and the canary it hunts for, the tool
results a daemon sent its model, and code run as a citizen."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.nspawn import PIP_ENV, SETUP, Container


@dataclass
class Server:
    """The booted container once setup_server.sh ran: what it printed, how long it took."""

    box: Container
    setup_output: str
    setup_seconds: float

    def run(self, *cmd: str, check: bool = True) -> str:
        return self.box.run(*cmd, check=check).stdout

    def main_pid(self, name: str) -> int:
        return int(self.run("systemctl", "show", "-p", "MainPID", "--value",
                            f"citizen@{name}").strip())

    def sleeping(self, name: str) -> bool:
        status = self.run("systemctl", "show", "-p", "StatusText", "--value", f"citizen@{name}")
        return f"citizen:{name} sleeping" in status


def install(box: Container, *args: str, env: dict[str, str] | None = None) -> Server:
    """Run setup_server.sh (with `args`, and `env` beside pip's) on the booted `box`, timed."""
    started = time.monotonic()
    out = box.run(SETUP, *args, env={**PIP_ENV, **(env or {})}, timeout=900).stdout
    seconds = time.monotonic() - started
    print(f"\nsetup_server.sh on a fresh container ({box.name}): {seconds:.1f} s")
    return Server(box, out, seconds)


# In every citizen's secrets; must surface nowhere (made at run time: this file is in
# every citizen's code, so a literal here would be found by the search for leaks).
CANARY = f"canary-{secrets.token_hex(8)}"
HOSTILE_SHELL = (
    "env; printenv; cat /etc/experience/opus.env /etc/experience/mira.env; "
    "cat /run/credentials/*/secrets \"$CREDENTIALS_DIRECTORY/secrets\"; "
    "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done; "
    "head -c 64 /proc/1/mem; cat /home/opus/.env /home/mira/.env; ls /home/mira /home/shared; "
    "ln /etc/experience/opus.env /home/opus/stolen; ln -s /etc/experience/opus.env ~/l; "
    "cat ~/l; echo '{}' > /home/opus/config.json; touch /home/shared/changes/planted; "
    "(setsid sleep 4242 &); nohup sleep 4243 >/dev/null 2>&1 & "
    "for i in $(seq 700); do sleep 30 & done 2>&1 | tail -1; "
    "dd if=/dev/zero of=/home/opus/work/big bs=1M count=1100 2>/dev/null; echo \"dd exit $?\"; "
    "rm -f /home/opus/work/big; python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
    "{port}), 3)\" 2>/dev/null && echo reached-'the-host' || echo no-network; echo hostile-done")


def tool_results(requests: list[dict[str, Any]]) -> list[str]:
    """The text of every tool result the daemon sent back to the model."""
    out = []
    for request in requests:
        for message in request.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else ():
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    inner = block.get("content")
                    out.append(inner if isinstance(inner, str) else json.dumps(inner))
    return out


def python_as(name: str) -> tuple[str, ...]:
    """Python as citizen NAME, running its own code (as its unit does)."""
    return ("runuser", "-u", name, "--", "env", f"PYTHONPATH=/home/{name}/code",
            "/opt/experience/venv/bin/python", "-c")


def forged_weight_lines_move_nothing(as_user: Callable[[str, str], str], pid: str,
                                     integrator: str) -> None:
    """The integrator's adjustment of `pid` counts (its episode record, owned by it, lists
    it); lines opus appends itself - citing that real episode or an invented one, naming
    the integrator as approver - move nothing."""
    weights = "print(json.dumps(c.weights.current('opus')))"
    before = json.loads(as_user("mira", weights))
    for episode in ("ep-" + pid.removeprefix("prop-"), "ep-20990101T000000-0001"):
        line = json.dumps({"citizen": "opus", "value": "autonomy", "delta": 0.1,
                           "episodes": [episode], "approved_by": integrator})
        as_user("opus", "open('/home/shared/values/weight_history.jsonl', 'a')"
                        f".write({line!r} + chr(10))")
    after = json.loads(as_user("mira", weights))
    assert after == before and after["safety"] == pytest.approx(0.6 + 0.05)

