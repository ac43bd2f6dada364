"""What the wake permits cost (citizen.broker.permits): a grant's latency, and the broker
holding N waiters.

    .venv/bin/python bench/permits.py                 # N = 10, 100, 1000; bound 4
    .venv/bin/python bench/permits.py --waiters 5000 --bound 8 --hold 0.005

A real dev-mode broker (`citizen broker run`, started by `client.ensure`) and real
clients (`citizen.access.permit.Permit`, a plain socket each, as a daemon asks). First
a free permit asked and given back, one after the other. Then, for each N: N citizens
ask at once (a thread each here), each holding its permit `--hold` seconds once granted:
request to grant (queueing included: the N/bound rounds before it), the hand-off (a
permit given back to the next one granted), and the peak of permits held - seen by the
clients, and by sampling the broker's own view - which must equal the bound. Last,
`--bound` permits are held while N ask; once the broker lists all N waiting, its RSS,
threads and CPU (over IDLE_S) are read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stats import show

IDLE_S = 10.0  # how long the broker's CPU is read while N wait


def wait_until(check: Callable[[], object], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("the broker never got there")
        time.sleep(0.01)  # polling the broker's view


def free(count: int, citizens: int) -> list[float]:
    """Request to grant of a free permit, `count` times, each given back at once (by
    `citizens` in turn: each citizen's requests count against its rate per minute)."""
    from citizen.access.permit import Permit

    out = []
    for i in range(count):
        started = time.perf_counter()
        with Permit(f"c{i % citizens:05d}").wait():
            out.append(time.perf_counter() - started)
    return out


class Waiters:
    """N citizens asking for a permit at once (a thread each), each holding it `hold_s`
    once granted: when each asked and was granted, when it gave it back, and the most
    held at once as the clients saw it."""

    def __init__(self, n: int, hold_s: float) -> None:
        from citizen.access.permit import Permit

        self.lock = threading.Lock()
        self.waits: list[float] = []
        self.grants: list[float] = []
        self.releases: list[float] = []
        self.holding = self.peak = 0

        def waiter(name: str) -> None:
            started = time.perf_counter()
            permit = Permit(name).wait()
            got = time.perf_counter()
            with self.lock:
                self.waits.append(got - started)
                self.grants.append(got)
                self.holding += 1
                self.peak = max(self.peak, self.holding)
            time.sleep(hold_s)
            with self.lock:
                self.holding -= 1
                self.releases.append(time.perf_counter())
            permit.release()

        self.threads = [threading.Thread(target=waiter, args=(f"c{i:05d}",), daemon=True)
                        for i in range(n)]
        for t in self.threads:
            t.start()

    def join(self) -> None:
        for t in self.threads:
            t.join()


def waiting_cost(n: int, bound: int, pid: int) -> None:
    """The broker's RSS, threads and CPU while N wait behind `bound` held permits."""
    import psutil

    from citizen.access.permit import Permit, listing

    blockers = [Permit(f"b{i:05d}").wait() for i in range(bound)]
    waiters = Waiters(n, 0.0)
    wait_until(lambda: len((listing() or {}).get("waiting", [])) == n)
    broker = psutil.Process(pid)
    rss, threads = broker.memory_info().rss / 2**20, broker.num_threads()
    before, started = sum(broker.cpu_times()[:2]), time.monotonic()
    time.sleep(IDLE_S)  # the broker holding them all waiting: what does it cost?
    cpu = (sum(broker.cpu_times()[:2]) - before) / (time.monotonic() - started)
    for b in blockers:
        b.release()
    waiters.join()
    print(f"N={n}: broker with {n} waiting: RSS {rss:.1f} MB, {threads} threads, CPU "
          f"{cpu * 100:.2f} % of a core (over {IDLE_S:.0f} s)")


def queue(n: int, bound: int, hold_s: float) -> None:
    """N ask at once, each holds its permit `hold_s`: request to grant, the hand-off, and
    the most held at once (the clients' count, and sampling the broker's view)."""
    from citizen.access.permit import listing

    seen = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.01):
            seen[0] = max(seen[0], len((listing() or {}).get("holders", [])))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    waiters = Waiters(n, hold_s)
    waiters.join()
    stop.set()
    sampler.join()
    # The first `bound` were granted at once; each later grant follows a release.
    later = sorted(waiters.grants)[bound:]
    handoffs = [g - r for r, g in zip(sorted(waiters.releases), later, strict=False)]
    show(f"N={n}: request to grant (bound {bound}, each holds {hold_s * 1000:.0f} ms)",
         waiters.waits, "ms", 1000)
    if handoffs:
        show(f"N={n}: hand-off (given back -> next granted)", handoffs, "ms", 1000)
    print(f"N={n}: peak permits held {waiters.peak} (clients), {seen[0]} (broker's view); "
          f"bound {bound}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiters", type=int, nargs="*", default=[10, 100, 1000])
    parser.add_argument("--bound", type=int, default=4, help="max_working_wakes")
    parser.add_argument("--hold", type=float, default=0.01, help="seconds each holds")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-permits-") as root:
        os.environ["CIV_ROOT"] = f"{root}/civ"
        os.environ["EXPERIENCE_OPERATOR_DIR"] = f"{root}/etc"
        Path(f"{root}/etc").mkdir()
        Path(f"{root}/etc/broker.json").write_text(json.dumps(
            {"max_working_wakes": args.bound}))
        most = max(args.waiters)
        for name in [f"c{i:05d}" for i in range(most)] + [f"b{i:05d}" for i in
                                                          range(args.bound)]:
            Path(root, "civ", name).mkdir(parents=True)  # a citizen is a home to the broker

        from citizen.access import client
        from citizen.config import paths

        client.ensure()
        pid = int((paths.broker_state() / "broker.pid").read_text())
        import psutil

        print(f"broker at rest: RSS {psutil.Process(pid).memory_info().rss / 2**20:.1f} MB, "
              f"{psutil.Process(pid).num_threads()} threads")
        free(20, most)  # warm
        show("a free permit: request to grant", free(500, most), "ms", 1000)
        for n in args.waiters:
            queue(n, args.bound, args.hold)
            waiting_cost(n, args.bound, pid)
        os.kill(pid, 15)


if __name__ == "__main__":
    main()
