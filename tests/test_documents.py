"""Shared documents: no lost update under contention, always parseable after kill -9."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.atomic import CorruptFile
from shared.documents import Document

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
    for round_ in range(30):
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"r{round_}-{i}",
                                   "100000"], env=env) for i in range(4)]
        time.sleep(rng.uniform(0.15, 0.6))  # the kill's random moment is what is tested
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        data = json.loads(path.read_text())  # whole, whatever moment the kills hit
        assert data["count"] == sum(data["by"].values())

