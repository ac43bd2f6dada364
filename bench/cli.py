"""What an operator waits for at the terminal: the read commands and `logs --follow`.

    .venv/bin/python bench/cli.py [--citizens 20] [--wakes 200] [--aged 0] [--runs 9]
    .venv/bin/python bench/cli.py --citizens 1000 --wakes 23 --aged 20 --status-only

A dev-mode civilization in a temporary root: `--citizens` homes, each with `--wakes`
wake logs of a working wake's shape and a few tasks; the first `--aged` of them written
three days ago (their events and mtimes), as a citizen's logs are on a lived-in server.
Timed as a person runs them (the console script in a fresh process): `status`, `logs
NAME`, `logs NAME --wake N`, `task list NAME`, `task show NAME ID`; and `logs --follow`'s
latency - from an event appended to the log of a wake in progress to its line on the
follower's stdout.
Prints medians and p95s (bench/stats.py).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stats import show
from citizen.config import paths
from citizen.home.tasks import TaskQueue
from citizen.home.wakelog import WakeLog
from shared import clock

CITIZEN = str(Path(sys.executable).parent / "citizen")


AGE_S = 3 * 86400.0  # an aged log: older than anything `status` counts as today


def populate(root: Path, citizens: int, wakes: int, aged: int = 0) -> list[str]:
    """Homes `c000…` with `wakes` ended wake logs (the first `aged` written AGE_S ago) and
    three tasks each."""
    os.environ["CIV_ROOT"] = str(root)
    names = [f"c{i:03d}" for i in range(citizens)]
    for name in names:
        home = paths.home(name)
        home.dir.mkdir(parents=True)
        (home.dir / "config.json").write_text(json.dumps(  # valid: status reads its cap
            {"email": f"{name}@experience.local", "focus": "bench",
             "budget": {"max_usd_per_day": 5.0}}))
        for n in range(1, wakes + 1):
            # The events' own times (world time, shared.clock) as the wakes wrote them.
            if n <= aged:
                os.environ[clock.CLOCK_ENV] = f"{time.time() - AGE_S},{time.time()},1"
            else:
                os.environ.pop(clock.CLOCK_ENV, None)
            log = WakeLog(home, n, "TASK")
            log.event("wake_start", citizen=name, type="TASK", slot=n % 10, pid=1,
                      reason="scheduled")
            log.event("gate", verdict="work", reason="a task is waiting")
            for _ in range(3):
                log.event("llm_call", purpose="execute", model="m", tokens_in=9000,
                          tokens_out=300, cost_usd=0.01, latency_s=2.0,
                          reply={"text": "ok", "tool_calls": [
                              {"name": "write_file", "input": {"path": "notes/a.md"}}]})
                log.event("tool_call", tool="write_file", args={"path": "notes/a.md"},
                          result="wrote 10 characters")
            log.event("wake_end", status="ok", reason="task done", cost_usd=0.03,
                      calls=3, duration_s=40.0)
            if n <= aged:
                old = time.time() - AGE_S
                os.utime(log.path, (old, old))
        os.environ.pop(clock.CLOCK_ENV, None)
        queue = TaskQueue(home.tasks)
        for i in range(3):
            queue.add(f"task {i} of {name}", source="cli")
    return names


def timed(args: list[str], runs: int, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds of each run; with `cpu`, the command's CPU seconds (user + system)
    appended to it - the figure a loaded machine distorts least."""
    took = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([CITIZEN, *args], check=True, capture_output=True)
        took.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return took


def follow_latency(name: str, samples: int) -> list[float]:
    """Seconds from an event appended to a running wake's log to the follower's line."""
    home = paths.home(name)
    number = len(list(home.wake_logs.iterdir())) + 1
    log = WakeLog(home, number, "TASK")
    log.event("wake_start", citizen=name, type="TASK", slot=0, pid=os.getpid(),
              reason="bench")
    proc = subprocess.Popen([CITIZEN, "logs", name, "--follow"], stdout=subprocess.PIPE,
                            text=True)
    lines: queue.Queue[str] = queue.Queue()
    # A thread reads the lines: select() on a buffered pipe misses lines already buffered.
    threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
    took = []
    try:
        _read_until(lines, "started (bench)")
        for i in range(samples):
            start = time.perf_counter()
            log.event("tool_call", tool="write_file", args={"path": f"notes/{i}.md"},
                      result=f"marker-{i}")
            _read_until(lines, f"marker-{i}")
            took.append(time.perf_counter() - start)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return took


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    for line in proc.stdout or []:
        lines.put(line)


def _read_until(lines: queue.Queue[str], needle: str, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if needle in lines.get(timeout=max(0.0, deadline - time.monotonic())):
                return
        except queue.Empty:
            break
    raise TimeoutError(f"the follower never printed {needle!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--citizens", type=int, default=20)
    parser.add_argument("--wakes", type=int, default=200)
    parser.add_argument("--aged", type=int, default=0,
                        help="how many of each citizen's logs were written 3 days ago")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--status-only", action="store_true",
                        help="time `status` and `status --json` alone")
    opts = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    try:
        names = populate(root, opts.citizens, opts.wakes, opts.aged)
        name = names[0]
        task = TaskQueue(paths.home(name).tasks).ids("queue")[0]
        print(f"{opts.citizens} citizens, {opts.wakes} wake logs each "
              f"({opts.aged} of them {AGE_S / 86400:.0f} days old), runs={opts.runs}")
        for args in (["status"], ["status", "--json"]):
            cpu: list[float] = []
            show(f"citizen {' '.join(args)}", timed(args, opts.runs, cpu), "ms", 1000)
            show(f"citizen {' '.join(args)} (CPU: user + system)", cpu, "ms", 1000)
        if opts.status_only:
            return
        show("citizen logs NAME (table of 30)", timed(["logs", name], opts.runs), "ms", 1000)
        show("citizen logs NAME --wake N", timed(["logs", name, "--wake", "7"], opts.runs),
             "ms", 1000)
        show("citizen task list NAME", timed(["task", "list", name], opts.runs), "ms", 1000)
        show("citizen task show NAME ID", timed(["task", "show", name, task], opts.runs),
             "ms", 1000)
        show("citizen --help", timed(["--help"], opts.runs), "ms", 1000)
        show("logs --follow: event written -> line printed", follow_latency(name, 30), "ms",
             1000)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
