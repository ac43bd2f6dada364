"""The commons on one server's files against the commons on PostgreSQL (several servers):
one shared document's updates at 1, 8 and 32 writers, and a ring from one server's
citizen to another server's broker.

    .venv/bin/python bench/commons_engines.py [--updates N] [--writers 1 8 32] [--rings N]

`file`: `Document.update` (shared/documents.py, the one flock), as bench/documents.py.
`postgres`: `BrokerCommons.update` (citizen/access/commons.py) through a broker process
(citizen/broker/commons.py) on a throw-away Debian PostgreSQL 15 cluster (fsync on, as
the tests' one): the row held FOR UPDATE in a transaction the broker keeps between the
writer's two calls (citizen/broker/holds.py), changed by the writer, written and
committed. Each writer is a
real process; they start together (each says "ready", waits for "go"). Printed per run:
updates/s, update() latency median, p95 and p99, tries per update, lost updates.

Rings: server a's broker (a process) and server b's listener (citizen/broker/rings.py, in
this process); each ring is timed from the citizen's call to b's listener hearing it:
median and p95 (goal <= 50 ms, docs/architecture.md §6). Run as root (PostgreSQL is
started as its own user) or as a user who may run initdb.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.racers import race  # noqa: E402
from bench.stats import pct  # noqa: E402
from tests.postgres import BIN, Cluster, _as_owner, unavailable  # noqa: E402

BROKER = """
import sys
from pathlib import Path
from citizen.broker import commons  # noqa: F401 - its routes
from citizen.broker.database import Database, Settings
from citizen.broker.ledger import Ledger
from citizen.broker.listener import listen
from citizen.broker.server import Broker
server, dsn, sock, state = sys.argv[1:5]
b = Broker(Ledger(Path(state) / f"ledger-{server}.db"), server_mode=False,
           database=Database(Settings(server, dsn)))
srv = listen(Path(sock), b, server_mode=False)
print("ready", flush=True)
srv.serve_forever(poll_interval=0.5)
"""

WRITER = """
import json, sys, time
from pathlib import Path
kind, target, n, out, me = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
calls, tries = [], [0]
def bump(d):
    tries[0] += 1
    d["count"] = d.get("count", 0) + 1
    d.setdefault("by", {})[me] = d["by"].get(me, 0) + 1
if kind == "file":
    from shared.documents import Document
    doc = Document(Path(target), lambda: {"count": 0, "by": {}}, mode=0o660)
    update = lambda: doc.update(bump)
else:
    from citizen.access.commons import BrokerCommons
    c = BrokerCommons(Path(target), me)
    update = lambda: c.update("bench/doc.json", lambda: {"count": 0, "by": {}}, bump)
print("ready", flush=True)
sys.stdin.readline()
for _ in range(n):
    t = time.monotonic()
    update()
    calls.append(time.monotonic() - t)
Path(out).write_text(json.dumps([calls, tries[0]]))
"""


def start_cluster(top: Path) -> Cluster:
    data, sock = top / "data", top / "sock"
    sock.mkdir(parents=True)
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "postgres", str(top)], check=True)
    subprocess.run(_as_owner([str(BIN / "initdb"), "-D", str(data), "-U", "postgres",
                              "--auth=trust", "-E", "UTF8", "--no-instructions"]),
                   check=True, capture_output=True)
    cluster = Cluster(data, sock)
    cluster.start()
    return cluster


def civilization(cluster: Cluster, names: list[str]) -> dict[str, str]:
    """A database with servers a and b; `names` live on a, `mira` on b: each one's dsn."""
    from citizen.broker import database

    cluster.sql("CREATE DATABASE bench")
    admin = cluster.dsn("bench")
    database.install(admin)
    dsns = {}
    for server, who in (("a", names), ("b", ["mira"])):
        role = cluster.role(f"bench_{server}")
        database.add_server(admin, server, role)
        dsns[server] = cluster.dsn("bench", role)
        db = database.Database(database.Settings(server, dsns[server]), max_size=1)
        for name in who:
            db.claim(name)
        db.close()
    return dsns


def broker(server: str, dsn: str, sock: Path, state: Path, env: dict[str, str]
           ) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", BROKER, server, dsn, str(sock), str(state)],
                            env=env, text=True, stdout=subprocess.PIPE)
    if proc.stdout is None or proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"broker {server} did not start")
    return proc


def run(kind: str, target: Path, writers: int, *, updates: int, env: dict[str, str],
        tmp: Path, read_count: Callable[[], int]) -> float:
    """One run of `writers` processes; prints its line, returns its update p99 (s)."""
    outs = [tmp / f"{kind}-{writers}-w{i}.json" for i in range(writers)]
    before = read_count()  # no writer writes before "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, kind, str(target), str(updates),
                               str(out), f"w{i}"], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
             for i, out in enumerate(outs)]
    wall = race(procs, kind)
    figures = [json.loads(out.read_text()) for out in outs]
    calls = [c for f in figures for c in f[0]]
    tries = sum(f[1] for f in figures)
    lost = writers * updates - (read_count() - before)
    ms = 1000
    print(f"{kind:<8} {writers:>2} writers: {writers * updates / wall:5.0f} updates/s  update "
          f"med {statistics.median(calls) * ms:6.1f} p95 {pct(calls, 0.95) * ms:6.1f} "
          f"p99 {pct(calls, 0.99) * ms:7.1f} ms  tries/update {tries / len(calls):4.2f}  "
          f"lost {lost}")
    return pct(calls, 0.99)


def rings(sock_a: Path, dsn_b: str, n: int) -> list[float]:
    from citizen.access.commons import BrokerCommons
    from citizen.broker.rings import Listener, Rings

    heard = Rings()
    listener = Listener(dsn_b, lambda c: c == "mira", heard)
    listener.start()
    if not listener.listening.wait(30):
        raise SystemExit("b's listener did not LISTEN")
    opus = BrokerCommons(sock_a, "w0")
    spans = []
    for i in range(n):
        sent = time.monotonic()
        opus.ring("mira", "debate", f"turn {i}")
        got = heard.take(timeout=10)
        if not got:
            raise SystemExit(f"ring {i} was not heard in 10 s")
        spans.append(got[0].heard - sent)
    listener.close()
    return spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rings", type=int, default=200)
    args = parser.parse_args()
    if unavailable():
        raise SystemExit(unavailable())
    top = Path(tempfile.mkdtemp(prefix="bench-commons-"))
    os.chmod(top, 0o755)  # noqa: S103 - the cluster's user and the writers reach inside
    civ = top / "civ"
    for i in range(max(args.writers)):  # dev mode: a citizen is a home that exists
        (civ / f"w{i}").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CIV_ROOT": str(civ)}
    cluster = start_cluster(top / "pg")
    procs: list[subprocess.Popen[str]] = []
    try:
        dsns = civilization(cluster, [f"w{i}" for i in range(max(args.writers))])
        sock_a = top / "a.sock"
        procs.append(broker("a", dsns["a"], sock_a, top, env))
        doc = top / "doc.json"

        def file_count() -> int:
            return int(json.loads(doc.read_text())["count"]) if doc.exists() else 0

        def pg_count() -> int:
            got = cluster.sql("SELECT data->>'count' FROM documents WHERE key = "
                              "'bench/doc.json'", "bench")
            return int(got or 0)

        print("\n# one shared document, read-modify-write; file = flock + fsync'd rename, "
              "postgres = through the broker, the row held FOR UPDATE between the writer's "
              "two calls")
        p99 = {}
        for writers in args.writers:
            p99[("file", writers)] = run("file", doc, writers, updates=args.updates, env=env,
                                         tmp=top, read_count=file_count)
            p99[("postgres", writers)] = run("postgres", sock_a, writers, updates=args.updates,
                                             env=env, tmp=top, read_count=pg_count)
        for writers in args.writers:
            f, p = p99[("file", writers)], p99[("postgres", writers)]
            print(f"{writers:>2} writers: update p99 postgres/file {p / f:5.2f}x")
        w = max(args.writers)
        verdict = "met" if p99[("postgres", w)] <= p99[("file", w)] else "NOT met"
        print(f"goal: p99 at {w} writers on PostgreSQL <= the file backend's: {verdict}")
        spans = rings(sock_a, dsns["b"], args.rings)
        med, p95 = statistics.median(spans) * 1000, pct(spans, 0.95) * 1000
        print(f"\n# a ring from server a's citizen to server b's listener (NOTIFY -> heard), "
              f"{len(spans)} rings\nring median {med:.2f} ms  p95 {p95:.2f} ms  max "
              f"{max(spans) * 1000:.2f} ms\ngoal: <= 50 ms: {'met' if p95 <= 50 else 'NOT met'}"
              " (p95; the wake a scheduler starts on it is not included)")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        cluster.stop("immediate")
        subprocess.run(["rm", "-rf", str(top)], check=False)


if __name__ == "__main__":
    main()
