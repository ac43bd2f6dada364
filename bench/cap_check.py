"""The daily caps' check before each model call, at 10, 100 and 1,000 citizens.

    .venv/bin/python bench/cap_check.py [--old PATH] [--calls 50]

A meter checks the citizen's and the civilization's daily caps before every call
(citizen.home.spend.Daily). Each citizen here has a day's ledger of 20 calls; what is
timed is a wake's checks: the first (a fresh process: every ledger it reads is read
whole) and each one after it; then the first check's one question to a running broker,
which replaces reading the peers' ledgers wherever a broker runs (every real call).
`--old PATH` runs an older tree's (a `git worktree add PATH REV`) in the same run.
Goal (the stance: a call's cost grows with the work, never with the headcount): a
call's check after the first flat from 10 to 1,000 citizens. Nothing here asserts.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("BENCH_TREE") or str(ROOT))
SIZES = (10, 100, 1000)


def measure(n: int, calls: int) -> dict[str, float]:
    """Milliseconds: the first check of a fresh meter, and the median of the rest."""
    from citizen.config import paths
    from citizen.home import spend

    with tempfile.TemporaryDirectory(prefix="bench-caps-") as root:
        os.environ["CIV_ROOT"] = root
        homes = []
        for i in range(n):
            home = paths.home(f"c{i:04d}")
            home.dir.mkdir(parents=True)
            for w in range(20):
                spend.record(home, wake=w, wake_type="TASK", purpose="execute", tier="fast",
                             model="m", tokens_in=900, tokens_out=90, cache_read=0,
                             cache_write=0, cost_usd=0.001)
            homes.append(home)
        daily = spend.Daily(homes[0], 5.0, 1e9, homes[1:])
        t = time.perf_counter()
        daily.check(0.01)
        first = time.perf_counter() - t
        rest = []
        for _ in range(calls):
            t = time.perf_counter()
            daily.check(0.01)
            rest.append(time.perf_counter() - t)
    return {"first_ms": first * 1000, "call_ms": statistics.median(rest) * 1000}


def broker_figure(runs: int = 30) -> float:
    """Milliseconds for the one question a wake's first check asks when a broker runs
    (citizen.access.client.civilization_spent), against a dev-mode broker."""
    from citizen.access import client
    from citizen.admin import founding
    from tests.conftest import stop_broker

    with tempfile.TemporaryDirectory(prefix="bench-caps-") as root:
        os.environ["CIV_ROOT"] = root
        founding.init(["opus", "mira", "aria"])
        client.ensure()
        try:
            client.civilization_spent("opus")  # the broker's own first answer: not timed
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                client.civilization_spent("opus")
                times.append(time.perf_counter() - t)
        finally:
            stop_broker(Path(root))
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--old", type=Path, help="an older tree, measured in the same run")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.calls)))
        return
    trees = {"new": ROOT, **({"old": args.old.resolve()} if args.old else {})}
    got: dict[str, dict[int, dict[str, float]]] = {k: {} for k in trees}
    for n in SIZES:
        for label, tree in trees.items():  # a fresh process each: the first check is cold
            env = {**os.environ, "BENCH_TREE": str(tree), "PYTHONPATH": str(tree)}
            out = subprocess.run([sys.executable, __file__, "--child", str(n), "--calls",
                                  str(args.calls)], env=env, capture_output=True, text=True,
                                 check=True)
            got[label][n] = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{label:<4} {n:5d} citizens: first check {got[label][n]['first_ms']:8.2f} ms,"
                  f" each call after it median {got[label][n]['call_ms']:8.4f} ms")
    print(f"new: with a broker running, the first check asks it instead: median "
          f"{broker_figure():.2f} ms at any headcount")
    new = got["new"]
    growth = new[SIZES[-1]]["call_ms"] / new[SIZES[0]]["call_ms"]
    print(f"goal: a call's check flat from {SIZES[0]} to {SIZES[-1]} citizens (<= x2): "
          f"new x{growth:.2f} - " + ("met" if growth <= 2 else "SHORT"))
    if "old" in got:
        old, top = got["old"], SIZES[-1]
        print(f"old x{old[top]['call_ms'] / old[SIZES[0]]['call_ms']:.2f}; at {top} citizens "
              f"old/new {old[top]['call_ms'] / new[top]['call_ms']:.0f}x a call")


if __name__ == "__main__":
    main()
