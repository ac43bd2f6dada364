"""The server's one scheduler on a booted server with real Unix users: what N sleeping
citizens cost, and whether their idle wakes keep to schedule.

    .venv/bin/python bench/scheduler_server.py [-n 100] [--interval 120] [--seconds 300]

Boots a container (tests/nspawn.py: root and systemd-nspawn needed), runs setup, onboards
N citizens (`citizen onboard`: a Unix user, a home and a clone of the code each), lets
each run once under `citizens.target` (a server switched from daemons: each has its
heartbeat) and stops it, then starts `experience-scheduler` with a wake every
`--interval` seconds (a drop-in on its ExecStart). After `--seconds`, from the
scheduler's own records and /proc: its USS in all and per citizen, the processes of the
citizens' users (none while they sleep), the idle wakes, their lateness against the
schedule and the gate's time. Prints medians and p95s; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stats import show  # noqa: E402
from tests.nspawn import PIP_ENV, SETUP, Container, unavailable  # noqa: E402

STATE = "/var/lib/experience-scheduler"
DROP_IN = "/etc/systemd/system/experience-scheduler.service.d"


def uss_mb(box: Container, pid: str) -> float:
    rollup = box.run("cat", f"/proc/{pid}/smaps_rollup").stdout
    return sum(int(line.split()[1]) for line in rollup.splitlines()
               if line.startswith(("Private_Clean", "Private_Dirty"))) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=100)
    parser.add_argument("--interval", type=float, default=120.0)
    parser.add_argument("--seconds", type=float, default=300.0)
    args = parser.parse_args()
    if unavailable():
        raise SystemExit(f"cannot boot a container here: {unavailable()}")
    box = Container(ROOT, name="experience-bench-sched")
    box.boot()
    try:
        run(box, args)
    finally:
        box.shutdown()


def run(box: Container, args: argparse.Namespace) -> None:
    box.run(SETUP, env=PIP_ENV, timeout=900)
    names = [f"b{i:04d}" for i in range(args.n)]
    t = time.monotonic()
    box.run("sh", "-c", "for n in " + " ".join(names) + "; do citizen onboard $n "
            ">/dev/null || exit 1; done", timeout=7200)
    print(f"{'onboarding ' + str(args.n) + ' citizens (users, homes, code)':<52} "
          f"{time.monotonic() - t:9.1f} s")
    everyone = [*names, "opus", "mira", "aria"]
    box.run("systemctl", "start", "citizens.target")
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and not all(
            box.run("test", "-e", f"/home/shared/monitor/heartbeats/{n}.json",
                    check=False).returncode == 0 for n in everyone):
        time.sleep(2)
    box.run("systemctl", "disable", "--now", "citizens.target", timeout=1800)
    box.run("mkdir", "-p", DROP_IN)
    box.run("sh", "-c", f"cat > {DROP_IN}/bench.conf", input=(
        "[Service]\nExecStart=\nExecStart=/opt/experience/venv/bin/python -m citizen run "
        f"--all --interval {args.interval}\n"))
    box.run("systemctl", "daemon-reload")
    t0 = time.time()
    box.run("systemctl", "start", "experience-scheduler")
    pid = box.run("systemctl", "show", "-p", "MainPID", "--value",
                  "experience-scheduler").stdout.strip()
    time.sleep(args.seconds)
    uss = uss_mb(box, pid)
    users = box.run("sh", "-c", "for n in " + " ".join(everyone) + "; do ps -u $n -o pid= "
                    "; done | wc -l").stdout.strip()
    status = json.loads(box.run("cat", f"{STATE}/status.json").stdout)
    scheduled = [n for n, line in status["citizens"].items() if line.get("state") != "failed"]
    lateness: list[float] = []
    took: list[float] = []
    idle = 0
    for name in everyone:
        raw = box.run("cat", f"{STATE}/idle/{name}.jsonl", check=False).stdout
        rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
        stamps = [datetime.fromisoformat(r["ts"]).timestamp() for r in rows
                  if r.get("request") == "slot"]
        idle += len(rows)
        took += [float(r.get("duration_s", 0)) for r in rows]
        if stamps:
            planned = min(ts - k * args.interval for k, ts in enumerate(stamps))
            lateness += [ts - (planned + k * args.interval) for k, ts in enumerate(stamps)]
    units = box.run("sh", "-c", "journalctl -u 'citizen-wake@*' -o cat | grep -c "
                    "'Starting citizen-wake' || true").stdout.strip()
    print(f"\n# {len(everyone)} citizens, real users, one scheduler; a wake every "
          f"{args.interval:.0f} s, watched {args.seconds:.0f} s ({time.time() - t0:.0f} s)")
    print(f"{'citizens scheduled (not failed)':<52} {len(scheduled):9d}")
    print(f"{'processes of the citizens users, asleep':<52} {users:>9}")
    print(f"{'idle wakes in the scheduler':<52} {idle:9d}")
    print(f"{'wake units started (wakes with work)':<52} {units:>9}")
    if lateness:
        show("scheduled wake lateness against its schedule", lateness, "s")
    if took:
        show("the gate in the scheduler", took, "ms", 1000)
    print(f"{'the scheduler: USS, all citizens':<52} {uss:9.1f} MB")
    print(f"{'  per citizen (USS / citizens)':<52} {uss * 1024 / len(everyone):9.1f} KB")


if __name__ == "__main__":
    main()
