"""A daemon starts and hears its doorbell without an inotify instance (issue 33: in dev
mode every daemon is one user, and the kernel's 128 instances a user ran out at the
129th daemon); a daemon that cannot start says why in `citizen status`."""

from __future__ import annotations

import errno
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import inotify_simple
import pytest

from citizen.config import paths
from citizen.daemon.doorbell import Watch
from citizen.home import wakelog
from shared import doorbell
from tests.anthropic_server import MessagesServer
from tests.daemons import Daemon, cli, daemon_env, heartbeat, start, wait_for

IDLE = ("--interval", "3600", "--first-wake", "3600")  # only the doorbell wakes it


def test_no_inotify_instance_means_polling(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def exhausted() -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(inotify_simple, "INotify", exhausted)
    bell = tmp_path / "doorbell"
    bell.mkdir()
    watch = Watch(bell)
    assert watch.mode == "polling (inotify: Too many open files)"
    (bell / ".kept.unreadable").write_text("")  # a bad ring kept aside is no ring
    assert watch.wait() is False
    doorbell.ring(bell, "REFLECT", "a peer's report")
    assert watch.wait() is True
    assert [r.wake_type for r in doorbell.drain(bell)] == ["REFLECT"]


def _no_inotify_namespace() -> bool:
    """Whether this machine lets us make a user namespace and set its inotify limit."""
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-Ur", "sh", "-c",
                           "echo 0 > /proc/sys/user/max_inotify_instances"],
                          capture_output=True, check=False)
    return done.returncode == 0


@pytest.mark.skipif(not _no_inotify_namespace(),
                    reason="needs unprivileged user namespaces (unshare -Ur)")
def test_a_daemon_without_inotify_answers_a_ring(civ: Path,
                                                 messages_api: MessagesServer) -> None:
    """The kernel itself refuses: the daemon runs in a user namespace of its own whose
    inotify instance limit is 0 (the neighbours' instances untouched), so inotify_init1
    fails with EMFILE as it did for the 129th daemon of one user."""
    env = daemon_env(civ, messages_api)
    limit = "echo 0 > /proc/sys/user/max_inotify_instances && exec \"$@\""
    proc = Daemon(["unshare", "-Ur", "sh", "-c", limit, "sh", sys.executable, "-m", "citizen",
                   "run", "opus", *IDLE], env)
    try:
        wait_for(lambda: heartbeat(civ).get("state") == "sleeping")
        assert heartbeat(civ)["doorbell"] == "polling (inotify: Too many open files)"
        assert "doorbell polled" in cli(env, "status", "--json")
        doorbell.ring(paths.home("opus").doorbell, "REFLECT", "a peer's report")
        home = paths.home("opus")
        (log,) = wait_for(lambda: wakelog.wake_logs(home), timeout=30)
        assert wakelog.summary(log)["reason"] == "doorbell: a peer's report"
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert "polling" in out and "Traceback" not in out


def test_a_daemon_that_cannot_start_says_why_in_the_status(
        civ: Path, messages_api: MessagesServer) -> None:
    env = daemon_env(civ, messages_api)
    bell = paths.home("opus").doorbell
    bell.rmdir()
    bell.write_text("")  # not a directory: the daemon cannot watch it
    proc = start(env, "opus", *IDLE)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "the daemon cannot start: FileExistsError" in out  # the journal's line
    assert heartbeat(civ)["state"] == "failed"
    shown = cli(env, "status")
    assert "failed to start: FileExistsError" in shown
