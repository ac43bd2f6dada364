"""The broker per call: its own CPU per forwarded call, and the time it adds, at 1, 10 and
100 callers at once (issue 45, item 4).

    .venv/bin/python bench/broker_cpu.py                         # this checkout's broker
    git worktree add /tmp/oldbroker <rev>                        # the broker before a change
    .venv/bin/python bench/broker_cpu.py --old /tmp/oldbroker    # both, the same run

Against the zero-latency stand-in (tests/anthropic_server.py, its connections kept alive
as the API's are: a new TCP connection per call would be the stand-in's cost, not the
broker's), each caller sends the same request directly and through the broker,
alternating (bench/broker.py's `alternate`: N callers are N threads in up to 4
processes, each its own citizen and its own kept-alive connection). Added time = through
the broker minus direct, per pair. CPU per call = the broker process's user + system time
(`/proc/<pid>/stat`, all its threads, ended ones included) over a round, divided by the
calls it forwarded in that round; the broker does nothing else meanwhile. Each broker runs
as `citizen broker run` from its own tree, on the same civilization and the same
stand-in; with --old the two take turns round by round, so both see the same machine.

The broker is one Python process: at most one core's worth of calls, 1 / (CPU per call)
a second (printed as its ceiling). N callers with no upstream latency keep up to N calls
queued there, so the time added at 100 callers is queueing - up to 100 x the CPU per
call - whatever the threading; the goals are the CPU per call staying flat, and 1 ms
added at 1 caller.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.broker import _answer, _worker, make_citizens
from bench.stats import pct

HERE = Path(__file__).resolve().parent.parent  # this checkout: the new broker

GOAL_ADDED_MS = 1.0  # at 1 caller, median (issue 45)
GOAL_FLAT = 1.25  # CPU per call at N callers over CPU per call at 1 caller: "flat"


@dataclass
class Figures:
    """What one broker showed at one N, over every round."""

    direct: list[float] = field(default_factory=list)
    through: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)  # per call, one per round


def cpu_s(pid: int) -> float:
    """User + system seconds of process `pid`, its ended threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(tree: Path, root: str) -> subprocess.Popen[bytes]:
    """`citizen broker run` of the tree at `tree`, serving the civilization at `root`."""
    from citizen.access.client import reachable
    from citizen.config import paths

    env = {**os.environ, "CIV_ROOT": root, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen([sys.executable, "-m", "citizen", "broker", "run"], cwd=tree,
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not reachable(paths.broker_socket()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the broker of {tree} did not start")
        time.sleep(0.05)  # polling the socket it is about to bind
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def one_round(pool: Any, socket: str, url: str, names: list[str], *, each: int, pid: int,
              into: Figures) -> None:
    """`names` call at once, `each` calls per side each; the broker's CPU meanwhile."""
    groups = [g for g in (names[i::4] for i in range(4)) if g]
    before = cpu_s(pid)
    parts = pool.map(_worker, [(socket, url, g, each) for g in groups])
    spent = cpu_s(pid) - before
    direct = [x for d, _ in parts for x in d]
    through = [x for _, b in parts for x in b]
    into.direct += direct
    into.through += through
    into.cpu_us.append(spent / len(through) * 1e6)


def report(label: str, n: int, fig: Figures, base_cpu: float) -> None:
    d, b, c = fig.direct, fig.through, fig.cpu_us
    added = [y - x for x, y in zip(d, b, strict=True)]  # each caller's pairs, in order
    goal = f"goal <= {GOAL_ADDED_MS:.1f} ms median" if n == 1 else "(no goal)"
    print(f"{label:<4} {n:>3} callers: added median {statistics.median(added) * 1e3:6.2f} ms "
          f"p95 {pct(added, 0.95) * 1e3:6.2f} ms   {goal}  [medians: direct "
          f"{statistics.median(d) * 1e3:.2f}, through {statistics.median(b) * 1e3:.2f} ms; "
          f"n={len(b)}]")
    cpu = statistics.median(c)
    flat = "(the base)" if n == 1 else \
        f"x{cpu / base_cpu:.2f} of 1 caller, goal flat (<= x{GOAL_FLAT})"
    print(f"{'':<4} {n:>3} callers: CPU/call median {cpu:6.0f} us  p95 {pct(c, 0.95):6.0f} us"
          f"   {flat}  [rounds={len(c)}; one core's ceiling {1e6 / cpu:.0f} calls/s]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="a tree of the old broker, run beside this one")
    parser.add_argument("--callers", default="1,10,100", help="callers at once, comma-separated")
    parser.add_argument("--calls", type=int, default=2000,
                        help="calls per side per round, shared among the callers")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per broker and N")
    args = parser.parse_args()
    counts = [int(x) for x in args.callers.split(",")]

    from citizen.config import paths
    from tests.anthropic_server import MessagesServer

    trees = {"new": HERE, "old": args.old.resolve()} if args.old else {"this": HERE}
    figures = {(k, n): Figures() for k in trees for n in counts}
    api = MessagesServer()
    stand_in = cast("type[BaseHTTPRequestHandler]", api.httpd.RequestHandlerClass)
    stand_in.protocol_version = "HTTP/1.1"  # kept alive, as the API's
    # Its head and body are two writes: without this, Nagle holds the body back for the
    # client's delayed ACK (40 ms) on a kept-alive connection.
    stand_in.disable_nagle_algorithm = True
    api.responder = _answer
    api.start()
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-broker-cpu-") as root, ctx.Pool(4) as pool:
        os.environ["CIV_ROOT"] = root
        names = make_citizens(root, max(counts), api.url)
        socket = str(paths.broker_socket())
        for r in range(args.rounds):
            for label, tree in (trees.items() if r % 2 == 0 else reversed(trees.items())):
                proc = start(tree, root)
                try:
                    # Warm: every citizen's rules loaded, every process's imports done.
                    pool.map(_worker, [(socket, api.url, names[i::4], 2) for i in range(4)])
                    for n in counts:
                        each = max(2, args.calls // n)
                        one_round(pool, socket, api.url, names[:n], each=each, pid=proc.pid,
                                  into=figures[(label, n)])
                finally:
                    stop(proc)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    api.stop()
    print(f"{args.calls} calls per side per round, {args.rounds} rounds, "
          f"{os.cpu_count()} CPUs; the stand-in answers at once")
    for label in trees:
        base = statistics.median(figures[(label, counts[0])].cpu_us)
        for n in counts:
            report(label, n, figures[(label, n)], base)


if __name__ == "__main__":
    main()
