"""How long the `citizen` command takes to answer before it does any work: `--help`,
`--version`, and a command's own `--help` (issue 45, item 5: goal `citizen --help` under
0.2 s; it took 0.49 s, importing every command module for its one line).

    git worktree add /tmp/old <rev>                      # the code to compare with
    .venv/bin/python bench/startup.py --old /tmp/old [--runs 21]

Each figure is a fresh interpreter, as a person at the terminal starts it
(`python -m citizen …` with the checkout first on the path), old and new interleaved so
that a busy machine slows both alike. Prints medians and p95s, and the ratio old/new.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stats import pct, show

HERE = Path(__file__).resolve().parent.parent
GOAL_S = 0.2  # issue 45: `citizen --help`
ARGVS = (["--help"], ["--version"], ["status", "--help"])


def once(checkout: Path, argv: list[str]) -> float:
    start = time.perf_counter()
    # The checkout (its directory and PYTHONPATH) provides `citizen`: old or new alike.
    subprocess.run([sys.executable, "-m", "citizen", *argv], cwd=checkout, check=True,
                   env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    sides = {"new": HERE, **({"old": args.old.resolve()} if args.old else {})}
    for argv in ARGVS:
        times: dict[str, list[float]] = {side: [] for side in sides}
        for checkout in sides.values():
            once(checkout, argv)  # warm the page cache and the bytecode
        for _ in range(args.runs):
            for side, checkout in sides.items():
                times[side].append(once(checkout, argv))
        label = "citizen " + " ".join(argv)
        for side, values in times.items():
            show(f"{label} ({side})", values, "ms", 1000)
        if "old" in times:
            ratio = statistics.median(times["old"]) / statistics.median(times["new"])
            print(f"{label}: old/new {ratio:.2f}x")
        if argv == ["--help"]:
            median = statistics.median(times["new"])
            met = "met" if median < GOAL_S else "NOT met"
            print(f"goal: citizen --help under {GOAL_S:.1f} s: median {median:.3f} s, "
                  f"p95 {pct(times['new'], 0.95):.3f} s - {met}")


if __name__ == "__main__":
    main()
