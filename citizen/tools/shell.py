"""`shell_command`: run a command in the citizen's sandbox (`citizen.sandbox`): its home,
no secrets in its environment or its files, nothing of the daemon's or its peers'."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess

from citizen import sandbox
from citizen.config import SECRET_KEYS
from citizen.tools.base import ToolEnv, ToolFailure, tool

MAX_TIMEOUT_S = 600
# Anything that looks like a credential stays out of tool subprocesses, plus the
# systemd sockets: a tool must not be able to signal readiness or feed the watchdog.
_SECRET_NAME = re.compile(r"KEY|PASS|TOKEN|SECRET|CREDENTIAL|AUTH", re.IGNORECASE)
_DAEMON_ONLY = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def scrubbed_env(home_dir: str) -> dict[str, str]:
    """The environment a tool subprocess gets: ours minus every secret."""
    env = {k: v for k, v in os.environ.items()
           if k not in SECRET_KEYS and k not in _DAEMON_ONLY and not _SECRET_NAME.search(k)}
    env["HOME"] = home_dir
    return env


@tool
def shell_command(env: ToolEnv, command: str, timeout: int = 60) -> str:
    """Run a shell command (bash) in your home directory and return its output. The home's
    top level and dotfiles are read-only here: write in work/, code/ or another directory.

    :param command: the command line to run
    :param timeout: seconds before the command is killed (at most 600)
    """
    code, text = run(env, command, timeout)
    return f"exit code {code}\n{text}"


def run(env: ToolEnv, command: str, timeout: int = 60, cwd: str = "") -> tuple[int, str]:
    """(exit code, output) of a command in the sandbox, in the home or `cwd` under it.

    :raises ToolFailure: no sandbox where one is required, a cwd outside the home, or
        the command timed out (it was killed with everything it started).
    """
    timeout = max(1, min(timeout, MAX_TIMEOUT_S))
    refused = sandbox.refusal()
    if refused:
        raise ToolFailure(refused)
    where = (env.home.dir / cwd).resolve()
    if not where.is_relative_to(env.home.dir.resolve()) or not where.is_dir():
        raise ToolFailure(f"{cwd!r} is not a directory in your home")
    network = bool(env.config.permissions.get("can_use_network", False))
    script = command if not cwd else f"cd {shlex.quote(str(where))} && {command}"
    proc = subprocess.Popen(
        sandbox.wrap(env.home, ["bash", "-c", script], trust=sandbox.Trust.OWN, network=network,
                     limits=sandbox.Limits(cpu_s=timeout + 5)),
        cwd=env.home.dir, env=scrubbed_env(str(env.home.dir)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so a timeout kills all it started
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ToolFailure(f"command timed out after {timeout} s and was killed") from exc
    return proc.returncode, out.decode("utf-8", errors="replace")
