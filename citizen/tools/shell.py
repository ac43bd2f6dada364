"""`shell_command`: run a command in the citizen's sandbox (`citizen.tools.sandbox`): its home,
no secrets in its environment or its files, nothing of the daemon's or its peers'."""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shlex
import signal
import subprocess
import time

from citizen.config import SECRET_KEYS
from citizen.tools import sandbox
from citizen.tools.base import ToolEnv, ToolFailure, tool

MAX_TIMEOUT_S = 600
# A command's output is read as it streams and never held whole: its first HEAD_BYTES
# and last TAIL_BYTES are kept (the conversation sees far less: base.RESULT_CHARS).
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 64 * 1024
CHUNK = 64 * 1024
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
    """Run a shell command (bash) in your home directory and return its output. Dotfiles
    and the daemon's own files (config.json, mail/, tasks/ ...) are read-only here.

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
    try:
        argv = sandbox.wrap(env.home, ["bash", "-c", script], trust=sandbox.Trust.OWN,
                            network=network, limits=sandbox.Limits(cpu_s=timeout + 5))
    except sandbox.SandboxRefused as exc:
        raise ToolFailure(str(exc)) from exc
    proc = subprocess.Popen(
        argv,
        cwd=env.home.dir, env=scrubbed_env(str(env.home.dir)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so a timeout kills all it started
    )
    try:
        out = read_capped(proc, timeout)
    except subprocess.TimeoutExpired as exc:
        _kill(proc)
        raise ToolFailure(f"command timed out after {timeout} s and was killed") from exc
    except BaseException:
        _kill(proc)  # the wake was stopped (SIGTERM): what it started stops with it, now
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
    return proc.returncode, out


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's process group (its own session: all it started) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def read_capped(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The output of `proc` as it streams, holding at most HEAD_BYTES + TAIL_BYTES: the
    first and the last of it are kept, what lies between is counted and discarded (a
    command printing a gigabyte once took the daemon to 3 GB).

    :raises subprocess.TimeoutExpired: it ran (or kept its output open) past `timeout`.
    """
    if proc.stdout is None:
        raise ValueError("read_capped needs the command's stdout as a pipe")
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    head, tail, dropped = bytearray(), bytearray(), 0
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise subprocess.TimeoutExpired(proc.args, timeout)
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            room = HEAD_BYTES - len(head)
            head += chunk[:room]
            tail += chunk[room:] if room > 0 else chunk
            if len(tail) > TAIL_BYTES:
                dropped += len(tail) - TAIL_BYTES
                del tail[:len(tail) - TAIL_BYTES]
    proc.wait(max(0.1, deadline - time.monotonic()))
    note = f"\n… {dropped} bytes discarded …\n" if dropped else ""
    return (head.decode("utf-8", errors="replace") + note
            + tail.decode("utf-8", errors="replace"))
