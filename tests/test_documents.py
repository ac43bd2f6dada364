"""Shared documents: no lost update under contention, always parseable after kill -9; the
directory's fsync after the lock is let go and before `update` returns."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.atomic import CorruptFile
from shared.documents import Document
from shared.locks import is_locked, lock_path

WRITER = """
import sys
from pathlib import Path
from shared.documents import Document
doc = Document(Path(sys.argv[1]), lambda: {"count": 0, "by": {}})
me = sys.argv[2]
def bump(d):
    d["count"] += 1
    d["by"][me] = d["by"].get(me, 0) + 1
for _ in range(int(sys.argv[3])):
    doc.update(bump)
"""


def counter(path: Path) -> Document:
    return Document(path, lambda: {"count": 0, "by": {}})


def test_read_update_and_default(tmp_path: Path) -> None:
    doc = counter(tmp_path / "c.json")
    assert doc.read() == {"schema_version": 1, "count": 0, "by": {}}
    assert doc.update(lambda d: d.update(count=5) or "changed") == "changed"
    assert doc.read()["count"] == 5
    assert oct((tmp_path / "c.json").stat().st_mode & 0o777) == "0o660"
    assert (tmp_path / ".c.json.lock").exists()  # kept: never deleted


@pytest.mark.parametrize("content", ["{not json", '{"schema_version": 7, "count": 1}',
                                     '["a list"]'])
def test_a_corrupt_or_unknown_document_is_never_overwritten(tmp_path: Path,
                                                            content: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(CorruptFile) as info:
        counter(path).update(lambda d: d.update(count=0))
    assert str(path) in str(info.value)
    assert path.read_text() == content


def test_32_writers_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{i}", "200"],
                              env=env) for i in range(32)]
    assert [p.wait(timeout=300) for p in procs] == [0] * 32
    data = json.loads(path.read_text())
    assert data["count"] == 32 * 200
    assert set(data["by"].values()) == {200}


def test_writers_killed_mid_write_leave_a_parseable_document(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    rng = random.Random(3)
    # There from the start: on a loaded machine a round's writers may all be killed
    # before one of them has started, and a round with no document checks nothing.
    counter(path).update(lambda d: None)
    for round_ in range(30):
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"r{round_}-{i}",
                                   "100000"], env=env) for i in range(4)]
        time.sleep(rng.uniform(0.15, 0.6))  # the kill's random moment is what is tested
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        data = json.loads(path.read_text())  # whole, whatever moment the kills hit
        assert data["count"] == sum(data["by"].values())



def test_the_directory_is_fsynced_after_the_lock_is_let_go_and_before_update_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"
    doc = counter(path)
    doc.update(lambda d: d.update(count=1))
    real_fsync = os.fsync
    seen: list[tuple[str, bool, int]] = []

    def fsync(fd: int) -> None:  # what each fsync of update() finds, at the moment it runs
        kind = "directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        seen.append((kind, is_locked(lock_path(path)), json.loads(path.read_text())["count"]))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    doc.update(lambda d: d.update(count=2))
    assert seen == [
        ("file", True, 1),  # the new bytes: under the lock, before the rename shows them
        ("directory", False, 2),  # the rename's durability: after the lock, before returning
    ]


BLOCKED_WRITER = """
import os, signal, stat, sys
from pathlib import Path
from shared.documents import Document
real_fsync = os.fsync
def fsync(fd):
    if stat.S_ISDIR(os.fstat(fd).st_mode):  # renamed, the directory not yet fsynced
        print("renamed", flush=True)
        signal.pause()  # until killed
    real_fsync(fd)
os.fsync = fsync
doc = Document(Path(sys.argv[1]), lambda: {"count": 0, "by": {}})
doc.update(lambda d: d.update(count=d["count"] + 1, by={**d["by"], "a": 1}))
"""


def test_a_writer_killed_between_its_rename_and_its_directory_fsync_loses_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    a = subprocess.Popen([sys.executable, "-c", BLOCKED_WRITER, str(path)], env=env,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert a.stdout is not None
        ready, _, _ = select.select([a.stdout], [], [], 60)
        assert ready and a.stdout.readline().strip() == "renamed"
        assert json.loads(path.read_text())["by"] == {"a": 1}  # a reader sees it already
        # Another writer gets the lock and builds on it while A waits for its directory.
        b = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "b", "1"], env=env)
        assert b.wait(timeout=60) == 0
        a.send_signal(signal.SIGKILL)
        a.wait()
    finally:
        a.kill()
        a.wait()
        a.stdout.close()  # type: ignore[union-attr]
    data = json.loads(path.read_text())
    assert data["count"] == 2 and data["by"] == {"a": 1, "b": 1}
    assert counter(path).update(lambda d: d["count"]) == 2  # nothing left locked
