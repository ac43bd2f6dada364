"""The daemon and its wakes are undumpable: a command running as the citizen's own user
cannot read the key out of /proc/<pid>/environ (the attack works on a dumpable process)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from citizen.config import paths

CANARY = "key-canary-90c1"
HOLDER = """
import sys, time
if sys.argv[1] == "1":
    from citizen.cli import undumpable
    undumpable()
print("ready", flush=True)
time.sleep(60)
"""
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root to run both sides as another user")
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def _environ_as_nobody(undumpable: bool) -> str:
    """What a process of the same (unprivileged) user reads from the holder's environ."""
    env = {**os.environ, "ANTHROPIC_API_KEY": CANARY, "PYTHONPATH": str(paths.project_dir())}
    holder = subprocess.Popen([*AS_NOBODY, sys.executable, "-c", HOLDER,
                               "1" if undumpable else "0"], env=env, stdout=subprocess.PIPE,
                              text=True, cwd="/")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        # setpriv execs the holder: its pid is the holder's own.
        reader = subprocess.run([*AS_NOBODY, "cat", f"/proc/{holder.pid}/environ"],
                                capture_output=True, text=True, check=False)
        return reader.stdout + reader.stderr
    finally:
        holder.kill()
        holder.wait()


def test_a_dumpable_process_leaks_its_key_to_its_own_user() -> None:
    assert CANARY in _environ_as_nobody(undumpable=False)


def test_an_undumpable_one_does_not() -> None:
    out = _environ_as_nobody(undumpable=True)
    assert CANARY not in out and "Permission denied" in out
