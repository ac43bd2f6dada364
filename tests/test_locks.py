"""The one lock (`shared.locks.locked`) across real processes: readers share it and shut
out a writer, bounded waits end in LockTimeout, a holder killed with SIGKILL releases
it, and a link or FIFO planted where a lock should be is never taken for one.

Nothing here sleeps to synchronise: a holder says "held" on its stdout, and a waiter
is seen queued for the lock in /proc/locks."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shared.errors import LockTimeout
from shared.locks import is_locked, lock_path, locked

ROOT = Path(__file__).resolve().parent.parent
HOLDER = """
import signal, sys
from pathlib import Path
from shared.locks import locked
with locked(Path(sys.argv[1]), shared=sys.argv[2] == "shared"):
    print("held", flush=True)
    signal.pause()  # until killed
"""


def _until(check: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s")
        time.sleep(0.01)


def _said_held(proc: subprocess.Popen[str], timeout: float) -> bool:
    """Whether `proc` printed "held" within `timeout` seconds (0: has it already)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return bool(ready) and proc.stdout.readline().strip() == "held"


@contextlib.contextmanager
def holding(path: Path, kind: str = "exclusive", wait: bool = True,
            ) -> Iterator[subprocess.Popen[str]]:
    """Another process takes the lock of `path` (`kind`) and keeps it until killed;
    with `wait`, once it says it holds it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), kind],
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, text=True)
    try:
        if wait:
            assert _said_held(proc, 30), "the holder never took the lock"
        yield proc
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def queued(lock: Path) -> list[tuple[str, int]]:
    """The requests waiting for `lock` in the kernel's queue: (READ or WRITE, pid)."""
    info = lock.stat()
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    waiting = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1] == "->" and fields[2] == "FLOCK" and fields[6] == where:
            waiting.append((fields[4], int(fields[5])))
    return waiting


def test_readers_share_the_lock_and_a_writer_waits_for_every_one(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    with holding(path, "shared") as reader:
        with locked(path, shared=True, timeout=0) as waited:  # a second reader at once
            assert waited < 1
        with pytest.raises(LockTimeout):  # a writer is shut out by the reader
            locked(path, timeout=0).__enter__()
        with holding(path, "exclusive", wait=False) as writer:
            _until(lambda: ("WRITE", writer.pid) in queued(lock_path(path)))
            assert not _said_held(writer, 0)  # queued behind the reader, not holding
            reader.kill()  # SIGKILL: no finally runs, the kernel drops the reader's lock
            assert _said_held(writer, 30)
            assert queued(lock_path(path)) == []
            with pytest.raises(LockTimeout):  # a writer shuts out readers
                locked(path, shared=True, timeout=0).__enter__()
    with locked(path, timeout=0):  # every holder gone: free at once
        assert lock_path(path).exists()  # the lock file is kept, never deleted


def test_bounded_waits_raise_lock_timeout_and_an_unbounded_one_waits(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    with holding(path) as holder:
        started = time.monotonic()
        with pytest.raises(LockTimeout, match="held by another process"):
            locked(path, timeout=0).__enter__()
        assert time.monotonic() - started < 2  # tried once
        started = time.monotonic()
        with pytest.raises(TimeoutError):  # also the built-in, as callers may catch
            locked(path, shared=True, timeout=0.3).__enter__()
        assert 0.3 <= time.monotonic() - started < 5

        got: list[float] = []
        def wait_for_it() -> None:
            with locked(path) as waited:  # no timeout: in the kernel's queue
                got.append(waited)
        waiter = threading.Thread(target=wait_for_it, daemon=True)
        waiter.start()
        _until(lambda: ("WRITE", os.getpid()) in queued(lock_path(path)))
        assert got == []
        holder.kill()  # the holder dies with its lock held
        waiter.join(timeout=30)
        assert len(got) == 1 and not waiter.is_alive()


def test_a_holder_killed_with_sigkill_leaves_nothing_locked(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    assert not is_locked(lock_path(path))
    with holding(path) as holder:
        assert is_locked(lock_path(path))
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert not is_locked(lock_path(path))
        with locked(path, timeout=0) as waited:  # nothing stale to clean up first
            assert waited < 1


def test_a_descriptor_the_caller_holds_is_locked_and_left_open(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with locked(path, lock_file=path, fd=fd):
            with pytest.raises(LockTimeout):  # the file itself is locked (another open)
                locked(path, lock_file=path, timeout=0).__enter__()
            assert not lock_path(path).exists()  # no lock file of its own
        os.write(fd, b"still open\n")
        with locked(path, lock_file=path, timeout=0):  # and released
            pass
    finally:
        os.close(fd)
    assert path.read_bytes() == b"still open\n"


def test_a_planted_link_or_fifo_is_never_taken_for_a_lock(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lock_path(path).symlink_to(elsewhere / "made-through-the-link")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        locked(path).__enter__()
    assert list(elsewhere.iterdir()) == []  # nothing created through the link
    lock_path(path).unlink()
    os.mkfifo(lock_path(path))
    started = time.monotonic()
    with pytest.raises(OSError, match="not a regular file"):
        locked(path, timeout=None).__enter__()  # refused at once, never waited on
    assert time.monotonic() - started < 2
    missing = tmp_path / "not-made" / "doc.json"
    with pytest.raises(FileNotFoundError):
        locked(missing, create=False).__enter__()
    assert not missing.parent.exists()  # create=False makes nothing, not even the directory


def test_a_new_lock_gets_its_mode_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        with locked(tmp_path / "doc.json", mode=0o660):
            pass
        existing = tmp_path / "theirs.lock"
        existing.touch(mode=0o600)
        with locked(existing, lock_file=existing, mode=0o660, create=False):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(lock_path(tmp_path / "doc.json").stat().st_mode) == 0o660
    assert stat.S_IMODE(existing.stat().st_mode) == 0o600  # a lock we only use keeps its mode


def _as_nobody(lock: Path) -> int:
    """0: user nobody (group nogroup) took `lock`; 1: it could not open it; 2: other."""
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, try, report by exit status only
        code = 2
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            with locked(lock, lock_file=lock, timeout=0, create=False):
                code = 0
        except PermissionError:
            code = 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_only_a_user_who_may_write_the_lock_file_takes_the_lock() -> None:
    """The daemon's 0640 lock: peers (its group) read the pid in it, never take it."""
    top = Path(tempfile.mkdtemp())
    try:
        top.chmod(0o755)  # nobody must reach the file to be refused by its mode
        lock = top / "daemon.lock"
        for mode, expected in ((0o640, 1), (0o660, 0)):
            with locked(lock, lock_file=lock, mode=mode):
                pass
            os.chown(lock, 0, 65534)
            assert _as_nobody(lock) == expected, oct(mode)
    finally:
        shutil.rmtree(top)
