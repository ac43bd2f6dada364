"""A model call's ledger work - reserve, then settle - on one server's SQLite ledger (old)
against the civilization's shared one on PostgreSQL (new), at 1 and at 8 callers.

    .venv/bin/python bench/spend.py [--calls 400] [--threads 1 8] [--rounds 2] [--dsn ADMIN]

`old`: citizen/broker/ledger.py (SQLite in WAL mode, totals in memory, one lock).
`new`: citizen/broker/spend.py's SharedLedger as a server's broker (its own role, one
pool of 8, row-level security on) on a throw-away Debian PostgreSQL 15 cluster on a Unix
socket, fsync on (as the tests' one); `--dsn` names an admin connection to a scratch
database instead (the schema is installed in it, a server `bench-…` and its role added,
citizens c00… assigned to it). Each caller is a
thread of one broker process with a citizen of its own, so 8 callers race on the
civilization's rows alone. The two take turns, `--rounds` times each, after a warm-up
that makes each citizen's rows. Printed: median and p95 per reserve+settle, calls/s, and
new/old ratios. Run as root (PostgreSQL runs as its own user) or as a user who may run
initdb. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stats import pct, show  # noqa: E402
from citizen.broker import database as civilization  # noqa: E402
from citizen.broker.database import Database, Settings  # noqa: E402
from citizen.broker.ledger import Caps, Ledger  # noqa: E402
from citizen.broker.spend import SharedLedger, Spending  # noqa: E402
from citizen.llm.base import Usage  # noqa: E402
from tests.postgres import BIN, Cluster, _as_owner, unavailable  # noqa: E402

CAPS = Caps(1e9, 1e9, 1e9, 1e9)  # never refusing: what is timed is the bookkeeping
USAGE = Usage(input_tokens=1200, output_tokens=300)


@contextlib.contextmanager
def local_cluster() -> Iterator[str]:
    """A throw-away cluster's admin connection string (tests/postgres.py's recipe)."""
    why = unavailable()
    if why:
        raise SystemExit(f"bench/spend.py: {why} - or give --dsn")
    top = Path(tempfile.mkdtemp(prefix="bench-spend-pg-"))
    data, sock = top / "data", top / "sock"
    sock.mkdir()
    if os.geteuid() == 0:  # initdb and postgres refuse root: the cluster is postgres's
        shutil.chown(top, "postgres")
        shutil.chown(sock, "postgres")
    subprocess.run(_as_owner([str(BIN / "initdb"), "-D", str(data), "-U", "postgres",
                              "--auth=trust", "-E", "UTF8", "--no-instructions"]),
                   check=True, capture_output=True, timeout=120)
    cluster = Cluster(data, sock)
    cluster.start()
    try:
        cluster.sql("CREATE DATABASE bench_spend")
        yield cluster.dsn("bench_spend")
    finally:
        cluster.stop("immediate")
        shutil.rmtree(top, ignore_errors=True)


def civilization_of(admin: str, citizens: list[str]) -> Settings:
    """A new server (a name and a role of its own, so no real server's open reservations
    are touched by its start) holding `citizens`."""
    from psycopg import conninfo

    civilization.install(admin)
    tag = secrets.token_hex(4)
    server, role = f"bench-{tag}", f"bench_{tag}"
    civilization.add_server(admin, server, role)
    for c in citizens:
        civilization.move_citizen(admin, c, server)
    return Settings(server, conninfo.make_conninfo(admin, user=role))


def run(ledger: Spending, citizens: list[str], calls: int) -> tuple[list[float], float]:
    """Each citizen's thread: `calls` reserve+settle; (each one's seconds, calls/s)."""
    times: list[float] = []
    lock = threading.Lock()
    go = threading.Barrier(len(citizens) + 1)

    def caller(citizen: str) -> None:
        mine = []
        go.wait()
        for _ in range(calls):
            t = time.perf_counter()
            ledger.settle(ledger.reserve(citizen, "m", 0.01, CAPS, "bench"), 0.004, USAGE, 200)
            mine.append(time.perf_counter() - t)
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=caller, args=(c,)) for c in citizens]
    for t in threads:
        t.start()
    go.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return times, len(times) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="reserve+settle per round, "
                        "split among the callers (default 400)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dsn", help="an admin connection to a database of your own")
    args = parser.parse_args()
    citizens = [f"c{i:02d}" for i in range(max(args.threads))]
    with contextlib.ExitStack() as stack:
        admin = args.dsn or stack.enter_context(local_cluster())
        db = Database(civilization_of(admin, citizens))
        stack.callback(db.close)
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-spend-")))
        ledgers: dict[str, Spending] = {"old": Ledger(folder / "ledger.db"),
                                        "new": SharedLedger(db)}
        for ledger in ledgers.values():
            stack.callback(ledger.close)
            run(ledger, citizens, 5)  # warm-up: every citizen's rows and the pool
        print(f"reserve+settle per call, old = SQLite ledger, new = shared on PostgreSQL "
              f"(server {db.server}), {args.calls} calls x {args.rounds} rounds each; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for n in args.threads:
            per = max(1, args.calls // n)
            got: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in ledgers}
            for _ in range(args.rounds):  # taking turns: a drift hits both alike
                for kind, ledger in ledgers.items():
                    times, rate = run(ledger, citizens[:n], per)
                    got[kind][0].extend(times)
                    got[kind][1].append(rate)
            for kind, (times, rates) in got.items():
                show(f"{kind} {n} caller{'s' * (n > 1)} ({sum(rates) / len(rates):,.0f} calls/s)",
                     times, "ms", 1000)
            (old, old_rates), (new, new_rates) = got["old"], got["new"]
            print(f"{'':<4}new/old at {n}: median x{pct(new, 0.5) / pct(old, 0.5):.1f}, "
                  f"p95 x{pct(new, 0.95) / pct(old, 0.95):.1f}, calls/s "
                  f"x{sum(new_rates) / sum(old_rates):.2f}")


if __name__ == "__main__":
    main()
