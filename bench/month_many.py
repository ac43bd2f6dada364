"""A prompt cache the civilization shares (issue 45): many citizens, old tree against new.

    .venv/bin/python bench/month_many.py --citizens 100 --days 1 --day-seconds 600 \
        --old /tmp/old-cache                       # ≈23 min on 2 cores, both trees
    .venv/bin/python bench/month_many.py --citizens 100 --days 1 --day-seconds 500 \
        --fresh --old /tmp/old-cache               # young citizens: small contexts
    .venv/bin/python bench/month_many.py --citizens 4 --days 1 --day-seconds 30  # a look

The same stream runs on each tree in turn - `--old PATH` (a checkout of the code before
the change, e.g. `git worktree add --detach /tmp/old-cache f6c1472`), then this one -
each in a fresh civilization of `--citizens` citizens under one `citizen run --all` (the
dev-mode crowd: a process for all of them, rather than 100 daemons on 2 cores) on a
simulated clock (`EXPERIENCE_CLOCK`, as bench/month.py). Every citizen gets one task a
world day, the arrivals staggered over the day (citizen i at hour 24 i / N, its doorbell
rung as `citizen task add` rings it), so the civilization's working wakes are spread
evenly: a citizen's own cache entry is a day old at its next wake, another citizen's a
few minutes. Every model call goes through the real SDK to one Messages API test server
(bench/month.py's terse model) whose prompt cache is one organisation's
(tests/prompt_cache.py: a read only for a byte-identical prefix up to a breakpoint, each
entry living its TTL of world time); the cached share is counted from the usage it
reports, the dollars from the citizens' ledgers (the meter's prices). Printed per tree:
the cached share of prompt tokens beside its goal (>= 80 %), and the dollars per working
wake (a wake with a model call) beside the old tree's, and what was not read, by block.
Nothing here asserts.

A month of 100 citizens does not fit 2 cores (a working wake is a process of ≈2 s of
CPU, and the crowd must keep up with the world clock or wakes bunch up): the default is
one world day, the first hour of which starts cold. Even at a world day of 600 s the
crowd falls behind the clock as the day goes on (the printed lag: world minutes from a
task given to its wake), so the wakes bunch up more than the stagger says, and "tasks
done" says how many of the day's tasks got their wake before the stop.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.month_model import Model, sleep_until  # noqa: E402
from bench.month_report import MONDAY  # noqa: E402

GOAL_CACHED = 0.80  # the goal: share of prompt tokens read from the cache
WAKE_MINUTES = 60.0  # the shipped config's wake interval
FOCUSES = ("architecture", "research", "operations", "testing", "documentation")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--citizens", type=int, default=100)
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--day-seconds", type=float, default=240.0,
                        help="wall seconds per world day (default 240)")
    parser.add_argument("--old", type=Path, default=None,
                        help="a checkout of the code before the change, run first")
    parser.add_argument("--parallel", type=int, default=2, help="wakes running at once")
    parser.add_argument("--fresh", action="store_true",
                        help="empty contexts (default: every context at 90 %% of its cap)")
    return parser.parse_args()


def names(n: int) -> list[str]:
    return [f"c{i:03d}" for i in range(n)]


def setup(root: Path, citizens: list[str], mature: bool) -> None:
    from bench.wake_cycle import fill_contexts
    from citizen.admin import founding
    from citizen.config import paths

    os.environ["CIV_ROOT"] = str(root)
    founding.init_shared()
    for i, name in enumerate(citizens):
        founding.init_citizen(name, {"email": f"{name}@example.org",
                                     "focus": FOCUSES[i % len(FOCUSES)]})
        cfg = paths.home(name).config
        data = json.loads(cfg.read_text())
        data["wake_interval_minutes"] = WAKE_MINUTES
        cfg.write_text(json.dumps(data, indent=2))
        if mature:
            fill_contexts(name, 0.9)


def give(name: str, day: int) -> None:
    """A task for `name`, its doorbell rung, as `citizen task add` does."""
    from citizen.admin import approvals
    from citizen.config import paths
    from citizen.home.tasks import TaskQueue

    queued = TaskQueue(paths.home(name).tasks).add(
        f"Write notes/day{day:02d}.md with today's status.", kind="TASK", source="cli")
    approvals.ring(name, "TASK", f"task {queued.id}")


def run(tree: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The stream on the code in `tree`; its figures."""
    from shared import clock
    from tests.anthropic_server import API_KEY, Behind, MessagesServer
    from tests.prompt_cache import PromptCache

    citizens = names(args.citizens)
    root = work / "civ"
    started = time.monotonic()
    setup(root, citizens, mature=not args.fresh)
    speed = 86400.0 / args.day_seconds
    os.environ[clock.CLOCK_ENV] = f"{MONDAY.timestamp()},{time.time() + 3.0},{speed}"
    server = MessagesServer()
    behind = Behind(Model(), PromptCache())
    server.responder = behind
    server.start()
    env = {**os.environ, "ANTHROPIC_API_KEY": API_KEY, "EXPERIENCE_PROVIDER": "anthropic",
           "ANTHROPIC_BASE_URL": server.url, "PYTHONPATH": str(tree)}
    out = (work / "crowd.out").open("w")
    crowd = subprocess.Popen([sys.executable, "-m", "citizen", "run", "--all",
                              "--parallel", str(args.parallel)], cwd=tree, env=env,
                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    print(f"  {tree}: {len(citizens)} citizens set up in {time.monotonic() - started:.0f} s; "
          f"a world day every {args.day_seconds:.0f} s; logs in {work}", flush=True)
    try:
        for day in range(args.days):
            for i, name in enumerate(citizens):
                sleep_until(MONDAY + timedelta(days=day, hours=24 * i / len(citizens)))
                give(name, day)
            print(f"  day {day + 1}: {len(citizens)} tasks given", flush=True)
        sleep_until(MONDAY + timedelta(days=args.days, hours=1))  # the last one's wake
    finally:
        os.killpg(crowd.pid, signal.SIGTERM)
        try:
            crowd.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(crowd.pid, signal.SIGKILL)
        server.stop()
    return figures(citizens, args.days, behind.counted)


def figures(citizens: list[str], days: int, counted: list[Any]) -> dict[str, Any]:
    """The cached share (the stand-in's usage) and the dollars per working wake (the
    ledgers), and the work done."""
    from bench.month_report import ledger
    from citizen.config import paths
    from citizen.home.tasks import TaskQueue

    prompt = sum(c.input_tokens + c.read + c.write for c in counted)
    read = sum(c.read for c in counted)
    missed: Counter[str] = Counter()  # what was not read, by block (tests/prompt_cache.py)
    for c in counted:
        for (_, block), n in c.missed.items():
            missed[block] += n
    cost, calls = 0.0, 0
    wakes: set[tuple[str, Any]] = set()
    for name in citizens:
        for day in range(days + 1):
            for line in ledger(name, (MONDAY + timedelta(days=day)).date()):
                cost += float(line.get("cost_usd", 0))
                wakes.add((name, line.get("wake")))
                calls += 1
    done = sum(len(TaskQueue(paths.home(n).tasks).ids("done")) for n in citizens)
    lags = sorted(lag(n, i, len(citizens)) for i, n in enumerate(citizens))
    return {"prompt": prompt, "read": read, "share": read / prompt if prompt else 0.0,
            "usd": cost, "wakes": len(wakes), "calls": calls, "done": done,
            "per_wake": cost / len(wakes) if wakes else 0.0,
            "missed": {b: n / prompt for b, n in missed.most_common(6)} if prompt else {},
            "lag_median": lags[len(lags) // 2], "lag_p90": lags[int(len(lags) * 0.9)]}


def lag(name: str, i: int, n: int) -> float:
    """World minutes from `name`'s first task being given to a wake claiming it (a day
    if none did): how far the crowd kept up with the clock."""
    from citizen.config import paths
    from citizen.home import wakelog

    given = (MONDAY + timedelta(hours=24 * i / n)).timestamp()
    for path in wakelog.wake_logs(paths.home(name)):
        for e in wakelog.read(path):
            if e["event"] == "task" and e.get("transition") == "claimed":
                at = datetime.fromisoformat(str(e["ts"]).replace("Z", "+00:00"))
                return (at.timestamp() - given) / 60
    return 24 * 60.0


def main() -> None:
    args = arguments()
    base = Path(tempfile.mkdtemp(prefix="bench-many-"))
    trees = ([("old", args.old.resolve())] if args.old else []) + [("new", ROOT)]
    results: dict[str, dict[str, Any]] = {}
    print(f"{args.citizens} citizens, {args.days} world days of a task each, arrivals "
          f"staggered over the day; trees: {', '.join(f'{k} {t}' for k, t in trees)}",
          flush=True)
    for label, tree in trees:
        work = base / label
        work.mkdir()
        results[label] = run(tree, work, args)
    print(f"\n{'tree':<4} {'prompt tokens':>13} {'read':>11} {'cached':>7} {'goal':>6} "
          f"{'calls':>6} {'working wakes':>13} {'tasks done':>10} {'$ all':>8} "
          f"{'$ / working wake':>16}")
    for label, r in results.items():
        print(f"{label:<4} {r['prompt']:>13} {r['read']:>11} {r['share']:>7.1%} "
              f"{'>= ' + format(GOAL_CACHED, '.0%'):>6} {r['calls']:>6} {r['wakes']:>13} "
              f"{r['done']:>10} {r['usd']:>8.3f} {r['per_wake']:>16.4f}")
    for label, r in results.items():
        print(f"  {label}: not read, share of all prompt tokens by block: "
              + ", ".join(f"{b} {v:.1%}" for b, v in r["missed"].items())
              + f"; a task's wake came {r['lag_median']:.0f} world minutes after it was "
              f"given (median; p90 {r['lag_p90']:.0f})")
    new = results["new"]
    print(f"\ngoal: >= {GOAL_CACHED:.0%} of prompt tokens read from cache - new "
          f"{new['share']:.1%} ({'met' if new['share'] >= GOAL_CACHED else 'NOT met'})"
          + (f", old {results['old']['share']:.1%}" if "old" in results else ""))
    if "old" in results and results["old"]["per_wake"]:
        old = results["old"]
        print(f"$ per working wake: new ${new['per_wake']:.4f} against old "
              f"${old['per_wake']:.4f} ({new['per_wake'] / old['per_wake'] - 1:+.1%}), "
              "same stream")
    (base / "many.json").write_text(json.dumps(results, indent=1))
    print(f"the figures as JSON: {base / 'many.json'}")


if __name__ == "__main__":
    main()
