"""Shared-document contention: throughput, lock wait and lost updates at 1, 8 and 32 writers.

    .venv/bin/python bench/documents.py [--updates N] [--writers 1 8 32] [--kinds flock filelock]

Each writer is a real process doing read-modify-write updates of one document. `flock`
is the commons' own path, `Document.update` (shared/documents.py: the one lock,
shared/locks.py, and the atomic write, shared/atomic.py); its lock wait and hold are
timed by wrapping the lock it takes, so whatever `update` does under it or after it is
what is measured. `filelock` is the same update under filelock's default lock (50 ms
polling), which is why we chose flock. Printed per run: updates/s, lock wait p50, p95,
p99 and max, the lock's hold median, `update()`'s own latency median and p99 (call to
return, the directory fsync included wherever it happens), and lost updates (the
document's count against the updates made, each writer's own count checked too).
The writers start together: each says "ready" once its imports are done and waits for
"go", so the figures are 32 writers contending, not 32 interpreters starting up (whose
imports, on 2 cores, would slow the lock's holder and fill the first second's waits).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.racers import race  # noqa: E402
from bench.stats import pct  # noqa: E402

WRITER = """
import json, sys, time
from contextlib import contextmanager
from pathlib import Path
import shared.documents as documents
from shared.atomic import read_json, write_json
path, kind, n, out, me = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
waits, holds, calls = [], [], []
def bump(d):
    d["count"] += 1
    d["by"][me] = d["by"].get(me, 0) + 1
if kind == "flock":
    real = documents.locked
    @contextmanager
    def timed(*args, **kwargs):
        with real(*args, **kwargs) as waited:
            waits.append(waited)
            held = time.monotonic()
            try:
                yield waited
            finally:
                holds.append(time.monotonic() - held)
    documents.locked = timed  # the wait and hold of the very lock update() takes
    doc = documents.Document(path, lambda: {"count": 0, "by": {}}, mode=0o660)
    print("ready", flush=True)
    sys.stdin.readline()  # "go": every writer imported and waiting
    for _ in range(n):
        t = time.monotonic()
        doc.update(bump)
        calls.append(time.monotonic() - t)
else:
    from filelock import FileLock
    lock = FileLock(str(path) + ".filelock")
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(n):
        t = time.monotonic()
        with lock:
            waits.append(time.monotonic() - t)
            held = time.monotonic()
            data = read_json(path) if path.exists() else {"schema_version": 1, "count": 0, "by": {}}
            bump(data)
            write_json(path, data, mode=0o660)
            holds.append(time.monotonic() - held)
        calls.append(time.monotonic() - t)
Path(out).write_text(json.dumps([waits, holds, calls]))
"""


def run(kind: str, writers: int, updates: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        doc = Path(tmp) / "doc.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        outs = [Path(tmp) / f"w{i}.json" for i in range(writers)]
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(doc), kind, str(updates),
                                   str(out), f"w{i}"], env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                 for i, out in enumerate(outs)]
        wall = race(procs, kind)
        figures = [json.loads(out.read_text()) for out in outs]
        data = json.loads(doc.read_text())
    waits, holds, calls = ([w for f in figures for w in f[k]] for k in range(3))
    lost = writers * updates - data["count"]
    lost_by = sum(updates - data["by"].get(f"w{i}", 0) for i in range(writers))
    ms = 1000
    print(f"{kind:<8} {writers:>2} writers: {writers * updates / wall:5.0f} updates/s  "
          f"wait p50 {pct(waits, 0.5) * ms:6.1f} p95 {pct(waits, 0.95) * ms:6.1f} "
          f"p99 {pct(waits, 0.99) * ms:6.1f} max {max(waits) * ms:7.1f} ms  "
          f"hold med {statistics.median(holds) * ms:5.2f} ms  "
          f"update med {statistics.median(calls) * ms:6.1f} p99 {pct(calls, 0.99) * ms:6.1f} ms"
          f"  lost {lost} ({lost_by} by writer)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--kinds", nargs="+", choices=["flock", "filelock"],
                        default=["flock", "filelock"])
    args = parser.parse_args()
    print("\n# one shared document, read-modify-write with fsync'd atomic writes")
    for kind in args.kinds:
        for writers in args.writers:
            run(kind, writers, args.updates)


if __name__ == "__main__":
    main()
