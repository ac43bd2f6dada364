"""Shared-document contention: throughput and lock wait at 1, 8 and 32 writers.

    .venv/bin/python bench/documents.py [--updates N]

Each writer is a real process doing read-modify-write updates (fsync'd atomic
writes) on one document. Compares the one lock, a blocking flock (shared/locks.py),
with filelock's default (50 ms polling), which is why we chose flock.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stats import pct  # noqa: E402

WRITER = """
import json, sys, time
from pathlib import Path
from shared.atomic import read_json, write_json
from shared.documents import Document
from shared.locks import locked
path, kind, n, out = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
waits = []
if kind == "flock":
    doc = Document(path, lambda: {"count": 0})
    for _ in range(n):
        with locked(path) as waited:
            data = doc.read()
            data["count"] += 1
            write_json(path, data, mode=0o660)
        waits.append(waited)
else:
    from filelock import FileLock
    lock = FileLock(str(path) + ".filelock")
    for _ in range(n):
        t = time.monotonic()
        with lock:
            waits.append(time.monotonic() - t)
            data = read_json(path) if path.exists() else {"schema_version": 1, "count": 0}
            data["count"] += 1
            write_json(path, data, mode=0o660)
Path(out).write_text(json.dumps(waits))
"""


def run(kind: str, writers: int, updates: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        doc = Path(tmp) / "doc.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        outs = [Path(tmp) / f"w{i}.json" for i in range(writers)]
        started = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(doc), kind, str(updates),
                                   str(out)], env=env) for out in outs]
        for p in procs:
            p.wait()
        wall = time.perf_counter() - started
        waits = [w for out in outs for w in json.loads(out.read_text())]
        count = json.loads(doc.read_text())["count"]
    lost = writers * updates - count
    print(f"{kind:<9} {writers:>2} writers: {writers * updates / wall:7.0f} updates/s  "
          f"wait p50 {pct(waits, 0.5) * 1000:7.1f} ms  p99 {pct(waits, 0.99) * 1000:7.1f} ms  "
          f"max {max(waits) * 1000:7.1f} ms  lost {lost}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--updates", type=int, default=200)
    args = parser.parse_args()
    print("\n# one shared document, read-modify-write with fsync'd atomic writes")
    for kind in ("flock", "filelock"):
        for writers in (1, 8, 32):
            run(kind, writers, args.updates)


if __name__ == "__main__":
    main()
