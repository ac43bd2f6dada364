"""SIGTERM to a dev-mode daemon's process group stops its wake and what the wake started
(issue 43, 4c): the wake used to run in a session of its own, so a group's SIGTERM reached
the daemon alone, and the wake and its sandboxed command ran on until their limits."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.anthropic_server import MessagesServer, no_deliverables, tool_use
from tests.daemons import daemon_env, start, wait_for

IDLE = ("--interval", "3600", "--first-wake", "3600")  # only the doorbell wakes it
MARK = "4173"  # the sandboxed command's own argument: `sleep 4173`, found in /proc


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process now."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text(errors="replace").rpartition(")")[2].split()
            if stat[0] != "Z":  # exited, not yet reaped: no longer running
                found[int(entry.name)] = (int(stat[1]), cmd)
    return found


def _wake_tree(daemon: int) -> set[int]:
    """The daemon's wake process and every process below it (but the broker), plus the
    sleeper (which the sandbox may have moved into a session of its own)."""
    procs = _processes()
    tree = {pid for pid, (ppid, cmd) in procs.items()
            if ppid == daemon and " wake " in f" {cmd} "}
    grew = True
    while grew:  # the dev-mode broker a wake starts serves every wake after it: not its
        below = {pid for pid, (ppid, cmd) in procs.items()
                 if ppid in tree and " broker run " not in cmd} - tree
        tree |= below
        grew = bool(below)
    return tree | {pid for pid, (_, cmd) in procs.items() if f"sleep {MARK}" in cmd}


def test_sigterm_to_the_daemons_group_stops_its_wake_and_its_sandboxed_run(
        civ: Path, messages_api: MessagesServer) -> None:
    messages_api.reply(no_deliverables())  # what the task must leave
    messages_api.reply(tool_use("respond", {"tools": ["shell_command"]}))  # tool selection
    messages_api.reply(tool_use("respond", {"tier": "fast"}))
    messages_api.reply(tool_use("shell_command", {"command": f"sleep {MARK}", "timeout": 600}))
    env = daemon_env(civ, messages_api)
    proc = start(env, "opus", *IDLE)
    wake: set[int] = set()
    try:
        subprocess.run([sys.executable, "-m", "citizen", "task", "add", "opus", "a long test"],
                       env=env, check=True, capture_output=True)
        wait_for(lambda: any(f"sleep {MARK}" in cmd for _, cmd in _processes().values()),
                 timeout=90)
        wake = _wake_tree(proc.pid)
        assert len(wake) >= 2  # the wake and its sandboxed command, at least
        os.killpg(proc.pid, signal.SIGTERM)  # the whole group, as a terminal or harness ends it
        try:
            wait_for(lambda: not (wake & set(_processes())), timeout=30)
        except AssertionError:
            print(proc.output(), {p: _processes().get(p) for p in wake})
            raise
        proc.wait(timeout=30)  # the daemon, its wake ended, stops too
    finally:
        for pid in (*wake, proc.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
