"""A crowd of dev-mode daemons: how many start and stay up, whether their idle wakes keep
to schedule, what an idle wake costs, and what a sleeping daemon holds.

    .venv/bin/python bench/daemons.py [-n 200] [--interval 60] [--seconds 240]
                                      [--inotify-limit 64]

N citizens are founded in a fresh dev-mode civilization and `citizen run NAME
--interval S` is started for each (no --first-wake: the daemon's own default), as an
operator starting a thousand would. The daemons run in a user and PID namespace of
their own (`unshare -Urpf`, root mapped to the caller):

- the namespace's inotify instance limit (/proc/sys/user/max_inotify_instances) is set
  to --inotify-limit. The kernel's per-user limit (fs.inotify.max_user_instances, 128)
  is shared by everything else this user runs on the machine, and instances in a child
  namespace are charged to the user outside too: a crowd that took all 128 would break
  the neighbours' tools. So the limit is scaled down (default 64), and a daemon that
  needs one instance each shows the same cliff at 64 that 1,000 daemons hit at 128;
- the PID namespace is fresh, so its last PID (/proc/sys/kernel/ns_last_pid) counts
  every process - and thread: a thread takes a PID too - started in it, by the kernel.
  (`strace -f -e execve` on one daemon tells the two apart.)

`--gates` times each wake type's gate in a civilization of N citizens, in this process
(what the daemon runs for an idle wake; a gate that lists every home grows with N).

`--floors` measures instead what any sleeping Python process holds by what it imports
(the floor under a per-citizen daemon): five copies of each at once, so the pages of the
interpreter and its libraries are shared as they are in a crowd, and what is left is each
copy's own (USS; Private_Dirty is the heap and the touched data).

Prints medians and p95s; nothing here asserts. Extrapolation to 1,000: the survivors
scale with the limit (N - limit without a fallback), the idle-wake cost and USS are per
daemon, and the lateness depends on the wakes per second the 2 cores must absorb
(N / interval: 200 / 60 s here is the load of 1,000 woken every 300 s).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stats import show  # noqa: E402


def found(n: int) -> list[str]:
    """Found a civilization of `n` citizens (c0000 …) under $CIV_ROOT."""
    from citizen import config
    from citizen.admin import founding

    tpl = config.templates()
    base = tpl.citizen_data(tpl.citizen_names()[0])
    names = [f"c{i:04d}" for i in range(n)]
    founding.init_shared()
    for name in names:
        founding.init_citizen(name, {**base, "email": f"{name}@example.org"})
    return names


def uss_kb(pid: int) -> int:
    """Private_Clean + Private_Dirty of a process (its unique set), in KB."""
    total = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1])
    return total


def cpu_ticks(pid: int) -> int:
    """utime + stime + cutime + cstime: the daemon's CPU and its reaped children's."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15])


def last_pid() -> int:
    return int(Path("/proc/sys/kernel/ns_last_pid").read_text())


SCHEDULER = False  # --scheduler: idle wakes are the scheduler's records, not home logs


def idle_records(root: Path, name: str) -> list[dict[str, object]]:
    path = root / ".scheduler" / "state" / "idle" / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wake_starts(root: Path, name: str) -> list[tuple[float, int, str, str]]:
    """(start time, pid, reason, status) of each wake of `name`, oldest first (under
    the scheduler, an idle wake's pid is the scheduler's: 0 here, filled in by the caller)."""
    if SCHEDULER:
        return [(datetime.fromisoformat(str(r["ts"])).timestamp(), -1, str(r["request"]),
                 str(r["status"])) for r in idle_records(root, name)]
    rows = []
    for log in sorted((root / name / "logs" / "wakes").glob("*.jsonl")):
        lines = log.read_text().splitlines()
        first, last = json.loads(lines[0]), json.loads(lines[-1])
        ts = datetime.fromisoformat(first["ts"]).timestamp()
        rows.append((ts, first.get("pid", 0), first.get("reason", ""),
                     last.get("status", "running") if last.get("event") == "wake_end"
                     else "running"))
    return rows


def hosted(root: Path, name: str, proc: subprocess.Popen[bytes]) -> bool:
    """Whether `name`'s heartbeat is `proc`'s (a crowd may have left a citizen out)."""
    if SCHEDULER:
        try:
            status = json.loads((root / ".scheduler" / "state" / "status.json").read_text())
        except (OSError, ValueError):
            return False
        line = status["citizens"].get(name, {})
        return bool(status["pid"] == proc.pid and line.get("state") not in (None, "failed"))
    try:
        beat = json.loads((root / "shared" / "monitor" / "heartbeats" / f"{name}.json")
                          .read_text())
    except (OSError, ValueError):
        return False
    return bool(beat.get("pid") == proc.pid and beat.get("state") != "failed")


def settle(root: Path, procs: dict[str, subprocess.Popen[bytes]], limit_s: float) -> None:
    """Wait until each daemon has written its heartbeat or ended (at most `limit_s`)."""
    beats = root / "shared" / "monitor" / "heartbeats"
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if SCHEDULER and all(p.poll() is not None or hosted(root, n, p)
                             for n, p in procs.items()):
            return
        if not SCHEDULER and all(p.poll() is not None or (beats / f"{n}.json").exists()
                                 for n, p in procs.items()):
            return
        time.sleep(0.5)


def report_wakes(root: Path, alive: dict[str, subprocess.Popen[bytes]], since: float,
                 interval: float, t0: float) -> int:
    """Print the schedule figures; returns the scheduled wakes started after `since`."""
    firsts: list[float] = []
    lateness: list[float] = []
    wakes = idle = in_daemon = 0
    for name, proc in alive.items():
        rows = [r for r in wake_starts(root, name) if r[2] == "slot"]
        if not rows:
            continue
        firsts.append(rows[0][0] - t0)
        # Against its schedule (start + first wake + k intervals), taken as the earliest
        # start the wakes imply: a first wake late under the start-up load counts too.
        planned = min(ts - k * interval for k, (ts, *_) in enumerate(rows))
        lateness += [ts - (planned + k * interval) for k, (ts, *_) in enumerate(rows)]
        window = [r for r in rows if r[0] >= since]
        wakes += len(window)
        idle += sum(1 for r in window if r[3] == "idle")
        in_daemon += sum(1 for r in window if r[1] in (proc.pid, -1))
    print(f"{'scheduled wakes in the window (idle / in the daemon)':<52} {wakes:9d}  "
          f"({idle} idle / {in_daemon} in the daemon)")
    if firsts:
        print(f"{'first wakes, s after the first daemon started':<52} "
              f"{min(firsts):9.1f} .. {max(firsts):.1f}")
    if lateness:
        show("scheduled wake lateness against its schedule", lateness, "s")
        print(f"{'  lateness max':<52} {max(lateness):9.2f} s")
    took = [float(json.loads(log.read_text().splitlines()[-1]).get("duration_s", 0))
            for log in root.glob("c*/logs/wakes/*.jsonl")]
    if SCHEDULER:  # the gate in the scheduler, as its idle record says
        took = [float(str(r.get("duration_s", 0))) for name in alive
                for r in idle_records(root, name)]
    if took:
        show("idle wake wall time as its log says (gate to end)", took, "ms", 1000)
    sizes = [float(log.stat().st_size) for log in root.glob("c*/logs/wakes/*.jsonl")]
    if SCHEDULER:  # an idle wake is one line of the scheduler's store
        sizes = [float(len(json.dumps(r, separators=(",", ":"))) + 1)
                 for name in alive for r in idle_records(root, name)]
    if sizes:
        show("bytes of an idle wake's log", sizes, "B")
    return wakes


def start_all(args: argparse.Namespace, names: list[str], out: Path,
              every: list[str]) -> dict[str, subprocess.Popen[bytes]]:
    """Start the daemons (or the one process hosting them all); citizen -> its process."""
    procs = {}
    global SCHEDULER  # noqa: PLW0603 - the bench's one mode switch
    SCHEDULER = args.scheduler
    if args.scheduler:
        args.crowd = True  # one process for all, writing no home (`run --all --scheduler`)
        every.append("--scheduler")
    if args.crowd:  # one process for all: `citizen run --all`
        with (out / "crowd.out").open("w") as fh:
            crowd = subprocess.Popen([sys.executable, "-m", "citizen", "run", "--all", *every],
                                     stdout=fh, stderr=subprocess.STDOUT)
        procs = dict.fromkeys(names, crowd)
    for name in names if not args.crowd else []:
        with (out / f"{name}.out").open("w") as fh:
            procs[name] = subprocess.Popen([sys.executable, "-m", "citizen", "run", name, *every],
                                           stdout=fh, stderr=subprocess.STDOUT)
    return procs


def inner(args: argparse.Namespace) -> None:
    """In the namespace: start the crowd, let it sleep and wake, measure."""
    Path("/proc/sys/user/max_inotify_instances").write_text(str(args.inotify_limit))
    root = Path(os.environ["CIV_ROOT"])
    names = sorted(p.name for p in root.iterdir() if (p / "config.json").is_file())
    out = root.parent / "daemon-logs"
    out.mkdir(exist_ok=True)
    t0 = time.time()
    every = ["--interval", str(args.interval)]
    procs = start_all(args, names, out, every)
    settle(root, procs, 600)
    started_s = time.time() - t0
    alive = {n: p for n, p in procs.items() if p.poll() is None and hosted(root, n, p)}
    since, pid0 = time.time(), last_pid()
    ticks0 = {p.pid: cpu_ticks(p.pid) for p in alive.values()}
    time.sleep(args.seconds)
    pid1 = last_pid()
    alive = {n: p for n, p in alive.items() if p.poll() is None}
    running = {p.pid for p in alive.values()}
    ticks = [cpu_ticks(pid) - ticks0[pid] for pid in running]
    uss = [float(uss_kb(pid)) for pid in running]
    shape = ("citizens in the server's scheduler, rehearsed (run --all --scheduler)"
             if args.scheduler else "citizens in one process (run --all)" if args.crowd
             else "dev-mode daemons")
    print(f"\n# {len(names)} {shape}, a wake every {args.interval:.0f} s, watched "
          f"{args.seconds:.0f} s after all started; inotify limit {args.inotify_limit} "
          "in their namespace")
    print(f"{'daemons started (s until all had beaten or ended)':<52} {len(names):9d}  "
          f"({started_s:.1f} s)")
    print(f"{'daemons still running':<52} {len(alive):9d}")
    dead = [n for n in names if n not in alive]
    if dead:
        said = out / ("crowd.out" if args.crowd else f"{dead[0]}.out")
        tail = said.read_text().strip().splitlines()[-1:]
        print(f"{'  e.g. ' + dead[0] + ' ended with':<52} {tail[0][:120] if tail else '-'}")
    wakes = report_wakes(root, alive, since, args.interval, t0)
    if wakes:
        print(f"{'PIDs taken per scheduled wake (processes + threads)':<52} "
              f"{(pid1 - pid0) / wakes:9.2f}  ({pid1 - pid0} in {wakes} wakes)")
        hz = os.sysconf("SC_CLK_TCK")
        print(f"{'CPU per wake, daemon + children (incl. heartbeats)':<52} "
              f"{sum(ticks) / hz / wakes * 1000:9.1f} ms")
    if uss and args.crowd:
        print(f"{'the one process: USS, all citizens':<52} {uss[0] / 1024:9.1f} MB")
        print(f"{'  a citizen (USS / citizens hosted)':<52} "
              f"{uss[0] / max(1, len(alive)):9.1f} KB")
    elif uss:
        show("sleeping daemon USS", uss, "MB", 1 / 1024)
    for proc in set(procs.values()):
        proc.terminate()
    for proc in set(procs.values()):
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


FLOORS = [  # (label, interpreter flags, what it imports)
    ("python -S, nothing imported", ["-S"], "time"),
    ("python with site (the venv's .pth files)", [], "time"),
    ("+ APScheduler's BackgroundScheduler", [], "apscheduler.schedulers.background"),
    ("  site + importlib.metadata alone (APScheduler's plugins)", [], "importlib.metadata"),
    ("  site + asyncio alone (apscheduler.util imports it)", [], "asyncio"),
    ("+ the daemon's own imports (citizen.daemon.process)", [], "citizen.daemon.process"),
    ("one scheduler holding 1,000 citizens' jobs (5 each)", [], "bench.crowd_jobs"),
]


def private_kb(pid: int) -> tuple[int, int]:
    """(USS, Private_Dirty) of a process, in KB."""
    fields = dict.fromkeys(("Private_Clean:", "Private_Dirty:"), 0)
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key = line.split(" ", 1)[0]
        if key in fields:
            fields[key] = int(line.split()[1])
    return sum(fields.values()), fields["Private_Dirty:"]


def floors(copies: int = 5) -> None:
    """What a sleeping Python process holds, by what it imports (see the docstring)."""
    code = ("import sys, time, {m}; sys.stdout.write('up\\n'); sys.stdout.flush(); "
            "time.sleep(600)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"# USS of a sleeping Python process ({copies} copies of each at once)")
    for label, flags, module in FLOORS:
        procs = [subprocess.Popen([sys.executable, *flags, "-c", code.format(m=module)],
                                  stdout=subprocess.PIPE, env=env) for _ in range(copies)]
        try:
            for proc in procs:
                assert proc.stdout is not None
                proc.stdout.readline()  # imported and asleep
            sizes = [private_kb(proc.pid) for proc in procs]
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
        show(label, [float(u) for u, _ in sizes], "MB", 1 / 1024)
        show("  of which Private_Dirty", [float(d) for _, d in sizes], "MB", 1 / 1024)


def gates(n: int, each: int = 40) -> None:
    """Each wake type's gate, idle, for `each` citizens of a civilization of `n`."""
    from citizen import config
    from citizen.config import paths
    from citizen.home import state
    from citizen.wake.flow import gate_here

    names = found(n)
    past = time.time() - 10  # the root settled, as on a server that has run a while
    os.utime(paths.civ_root(), (past, past))
    tpl = config.templates()
    took: dict[str, list[float]] = {}
    for name in names[:each]:
        for _ in range(10):
            number, slot = state.allocate(paths.home(name), scheduled=True)
            t = time.perf_counter()
            gate_here(name, number=number, slot=slot, wake_type=None, reason="slot")
            took.setdefault(tpl.wake_slots(name)[(slot or 0) % 10], []).append(
                time.perf_counter() - t)
    print(f"# idle gates of {each} citizens in a civilization of {n}, in-process")
    for kind, times in sorted(took.items()):
        show(f"{kind} gate", times, "ms", 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--inotify-limit", type=int, default=64)
    parser.add_argument("--crowd", action="store_true",
                        help="one process for all (`citizen run --all`) instead of one each")
    parser.add_argument("--scheduler", action="store_true",
                        help="the server's scheduler (`citizen run --all --scheduler`): one "
                             "process that writes no home")
    parser.add_argument("--gates", action="store_true",
                        help="time each wake type's gate in a civilization of N citizens")
    parser.add_argument("--floors", action="store_true",
                        help="measure what a sleeping Python process holds, by its imports")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floors:
        floors()
        return
    if args.inner:
        inner(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench-daemons-") as top:
        root = Path(top) / "civ"
        root.mkdir()
        os.environ["CIV_ROOT"] = str(root)
        t = time.perf_counter()
        if args.gates:
            gates(args.n)
            return
        names = found(args.n)
        print(f"{'founding ' + str(args.n) + ' citizens':<52} {time.perf_counter() - t:9.1f} s")
        if args.scheduler:
            # Citizens that have run before (a server switched from daemons): one that
            # never woke has its first wake in its unit, to write its heartbeat.
            from citizen.config import paths
            from citizen.daemon import status

            for name in names:
                status.beat(paths.home(name), name=name, state=status.State.STOPPED,
                            current="", next_at=None, wakes_run=0)
        # A user namespace of our own (root mapped to us: the homes stay ours) for its own
        # inotify limit, and a PID namespace whose PID counter counts what starts in it.
        subprocess.run(["unshare", "-Urpf", "--mount-proc", sys.executable, __file__,
                        "--inner", "-n", str(args.n), "--interval", str(args.interval),
                        "--seconds", str(args.seconds), *(["--crowd"] if args.crowd else []),
                        *(["--scheduler"] if args.scheduler else []),
                        "--inotify-limit", str(args.inotify_limit)],
                       check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


if __name__ == "__main__":
    main()
