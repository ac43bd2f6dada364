"""A month of a civilization on a budget, in under an hour (issue 17).

    .venv/bin/python bench/month.py                       # 30 days, ≈25 min
    .venv/bin/python bench/month.py --days 4 --day-seconds 30
    .venv/bin/python bench/month.py --fresh                # citizens born on day 1
    .venv/bin/python bench/month.py --code --backup        # issue 18's figures
    .venv/bin/python bench/month.py --days 9 --announce-day 8   # the evolution loop (issue 30)
    .venv/bin/python bench/month.py --days 2 --fresh --no-stream  # nothing to do: $0.00?

Real daemons (`citizen run`, one process per citizen) on a simulated clock
(`EXPERIENCE_CLOCK`, see shared.clock): each daemon's scheduler wakes it every
`wake_interval_minutes` of *world* time, which passes `86400 / --day-seconds` times
faster than the wall clock. Every model call goes through the real SDK to the Messages
API test server, which answers as a terse competent model and counts usage as the API
does (a repeated `cache_control` prefix of ≥ 1024 tokens is read from cache); the meter
prices each call at the council's Claude rates.

The stream, by world day (Monday first): on weekdays a few tasks by the operator
(`citizen task add`; the mail intake makes the same task with no model call), a
proposal on Tuesdays and Thursdays (`citizen proposal start`), a debate on Wednesdays
(`citizen debate start`); weekends and a two-day holiday (days 29-30) are idle. A
fourth citizen, rex, turns runaway in the third week: its model starts a debate at
every call; the week after, it behaves again.

Per world day it prints dollars, calls, the prompt tokens an average call carries by
purpose, the cached share of prompt tokens, context sizes, disk written and any work
refused for budget; then the issue's goals, each with the figure that decides it.
With `--code` each citizen has its git `~/code` (a clone of the baseline, as
`citizen init` makes them) and runs from it; with `--backup` the operator's
`citizen backup now` runs at the end of every world day (as experience-backup.timer
does) and its time, the bytes it added and the repository's size are printed.
With `--announce-day N` (implies `--code`) opus commits a note in its ~/code on world
day N and announces it (`citizen tool opus code_announce`); no task asks anyone to
review it: the REVIEW wakes (rung by the announcement, slot 6 for the rest) report and
adopt it, and the loop's cost per day is printed beside a day with the same stream and
nothing announced. The model reports "worked" from the diff and never runs code_test
(the project's whole suite in the sandbox: CPU, not dollars). Nothing here asserts.
The figures and their report: bench/month_report.py; the model: bench/month_model.py.
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
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cache_report import report_cache  # noqa: E402
from bench.month_model import Model, sleep_until  # noqa: E402
from bench.month_report import (  # noqa: E402
    CITIZENS,
    MONDAY,
    RUNAWAY,
    contexts,
    disk,
    ledger,
    report,
    report_backups,
    report_evolution,
)

HOLIDAY = (28, 29)  # a Monday and Tuesday off: with the weekend, four idle days
WAKE_MINUTES = 120.0  # world time between scheduled wakes
TASK_HOUR = 8  # world hour the day's tasks arrive


# ------------------------------------------------------------------ the civilization


def setup(root: Path, mature: bool, code: bool, minutes: float = WAKE_MINUTES) -> None:
    from bench.wake_cycle import fill_contexts
    from citizen.admin import founding
    from citizen.config import paths

    os.environ["CIV_ROOT"] = str(root)
    founding.init(list(CITIZENS))
    founding.init_citizen(RUNAWAY, {"email": f"{RUNAWAY}@example.org",
                                        "focus": "operations"})
    for name in (*CITIZENS, RUNAWAY):
        cfg = paths.home(name).config
        data = json.loads(cfg.read_text())
        data["wake_interval_minutes"] = minutes
        cfg.write_text(json.dumps(data, indent=2))
        if mature:  # a citizen months into its life: every context at 90 % of its cap
            fill_contexts(name, 0.9)
    if code:
        founding.init_code([*CITIZENS, RUNAWAY])


def backup() -> dict[str, float]:
    """`citizen backup now` as the timer runs it: wall seconds, bytes added, repo size."""
    from citizen.config import paths

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "citizen", "backup", "now", "--json"],
                          check=False, timeout=3600, capture_output=True, text=True)
    took = time.monotonic() - started
    try:
        summary = json.loads(done.stdout)
    except ValueError:
        print(f"  backup failed: {done.stderr.strip()[-300:]}", flush=True)
        return {"seconds": took, "added": 0, "repo": 0, "ok": 0}
    repo = Path(f"{paths.civ_root()}.backup")
    return {"seconds": took, "restic": summary.get("seconds", 0.0),
            "added": summary.get("added_bytes", 0), "repo": disk(repo),
            "ok": 1, "quiescent": 1 if summary.get("quiescent") else 0}


def announce(day: int) -> str:
    """opus commits a note in its ~/code and announces it, as its model would in a CODE
    wake; what was fed."""
    from citizen.config import paths

    code = paths.home("opus").code
    note = code / "docs" / f"month-note-{day + 1:02d}.md"
    note.write_text(f"# A note\n\nWritten on world day {day + 1}.\n")
    for step in (["add", str(note)], ["commit", "-q", "-m", f"a note on day {day + 1}"]):
        subprocess.run(["git", "-C", str(code), *step], check=True, capture_output=True)
    done = subprocess.run([sys.executable, "-m", "citizen", "tool", "opus", "code_announce",
                           json.dumps({"description": f"a note on day {day + 1}",
                                       "expected_outcome": "the note is there; nothing else "
                                                           "changes"})],
                          check=False, timeout=120, capture_output=True, text=True)
    if done.returncode:
        print(f"  announcing failed: {done.stderr.strip()[-300:]}", flush=True)
    return "announce"


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "citizen", *args], check=False, timeout=120,
                   capture_output=True)


def feed(day: int, tasks_per_day: int) -> list[str]:
    """The operator's stream for world day `day`; what was fed."""
    weekday = day % 7
    if weekday >= 5 or day in HOLIDAY:
        return []  # the weekend, a holiday: idle
    fed = []
    for i in range(tasks_per_day):
        name = CITIZENS[(day + i) % len(CITIZENS)]
        cli("task", "add", name, f"Write notes/day{day:02d}-{i}.md with today's status.")
        fed.append(f"task:{name}")
    cli("task", "add", RUNAWAY, f"Write notes/day{day:02d}-ops.md with the ops log.")
    fed.append(f"task:{RUNAWAY}")
    if weekday in (1, 3):
        cli("proposal", "start", "--by", CITIZENS[day % 3],
            f"Create notes/proposal-{day:02d}.md saying 'adopted'")
        fed.append("proposal")
    if weekday == 2:
        cli("debate", "start", "--topic", f"Week {day // 7}: tests before features?",
            "--with", ",".join(CITIZENS))
        fed.append("debate")
    return fed


# ------------------------------------------------------------------ the run


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--day-seconds", type=float, default=45.0,
                        help="wall seconds per world day (default 45: 30 days ≈ 23 min)")
    parser.add_argument("--tasks-per-day", type=int, default=3)
    parser.add_argument("--wake-minutes", type=float, default=WAKE_MINUTES,
                        help=f"world minutes between scheduled wakes (default "
                             f"{WAKE_MINUTES:.0f}; the shipped config says 60)")
    parser.add_argument("--fresh", action="store_true",
                        help="start with empty contexts (default: every context at 90 %% of "
                             "its cap, a citizen months into its life)")
    parser.add_argument("--runaway-from", type=int, default=14,
                        help="the world day rex turns runaway (-1: never)")
    parser.add_argument("--code", action="store_true",
                        help="give every citizen its git ~/code and run the daemons from it")
    parser.add_argument("--backup", action="store_true",
                        help="`citizen backup now` at the end of every world day")
    parser.add_argument("--no-stream", action="store_true",
                        help="feed nothing: a civilization with nothing to do or review")
    parser.add_argument("--announce-day", type=int, default=0,
                        help="the world day (1-based) opus announces a change; implies --code")
    args = parser.parse_args()
    args.code = args.code or args.announce_day > 0
    return args


def serve(runaway_from: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A server per citizen, so the report knows whose each request was; one prompt
    cache for all of them, as the API keeps one per organisation."""
    from tests.anthropic_server import Behind, MessagesServer
    from tests.prompt_cache import PromptCache

    cache = PromptCache()
    servers = {name: MessagesServer() for name in (*CITIZENS, RUNAWAY)}
    behind = {name: Behind(Model(runaway_from if name == RUNAWAY and runaway_from >= 0
                                 else None), cache) for name in servers}
    for name, s in servers.items():
        s.responder = behind[name]
        s.start()
    return servers, behind


def main() -> None:
    args = arguments()

    from shared import clock
    from tests.anthropic_server import API_KEY

    work = Path(tempfile.mkdtemp(prefix="bench-month-"))
    root = work / "civ"
    setup(root, mature=not args.fresh, code=args.code, minutes=args.wake_minutes)
    speed = 86400.0 / args.day_seconds
    anchor = time.time() + 3.0
    os.environ[clock.CLOCK_ENV] = f"{MONDAY.timestamp()},{anchor},{speed}"
    servers, behind = serve(args.runaway_from)
    daemons = {}
    for name in (*CITIZENS, RUNAWAY):
        env = {**os.environ, "ANTHROPIC_API_KEY": API_KEY, "EXPERIENCE_PROVIDER": "anthropic",
               "ANTHROPIC_BASE_URL": servers[name].url}
        out = (work / f"{name}.out").open("w")
        daemons[name] = subprocess.Popen([sys.executable, "-m", "citizen", "run", name],
                                         env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
    print(f"{len(daemons)} daemons, a world day every {args.day_seconds:.0f} s (speed "
          f"{speed:.0f}x, a scheduled wake every {args.wake_minutes:.0f} world minutes = "
          f"{clock.wall_seconds(args.wake_minutes * 60):.1f} s); logs in {work}", flush=True)
    fed: dict[int, list[str]] = {}
    snaps: dict[int, tuple[int, dict[str, int]]] = {}
    backups: dict[int, dict[str, float]] = {}
    last_disk = disk(root)
    try:
        for day in range(args.days):
            at = MONDAY + timedelta(days=day)
            sleep_until(at + timedelta(hours=TASK_HOUR))
            fed[day] = [] if args.no_stream else feed(day, args.tasks_per_day)
            if day + 1 == args.announce_day:
                fed[day].append(announce(day))
            sleep_until(at + timedelta(days=1))
            now = disk(root)
            snaps[day] = (now - last_disk, {n: contexts(n) for n in (*CITIZENS, RUNAWAY)})
            last_disk = now
            print(f"  day {day + 1} over: fed {', '.join(fed[day]) or 'nothing'}", flush=True)
            if args.backup:
                backups[day] = backup()
    finally:
        for p in daemons.values():
            with _quiet():
                os.killpg(p.pid, signal.SIGTERM)
        for p in daemons.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        for s in servers.values():
            s.stop()
    per_day = report(args, fed, snaps, work)
    report_cache({name: list(zip(ledgers(name, args.days), behind[name].counted,
                                 strict=False)) for name in servers})
    if backups:
        report_backups(root, backups)
    if args.code:  # the loop needs ~/code: REVIEW wakes act only there
        report_evolution(per_day, fed, args.announce_day)


def ledgers(name: str, days: int) -> list[dict[str, Any]]:
    """`name`'s ledger lines of the run, in call order."""
    lines = [ln for day in range(days + 1)
             for ln in ledger(name, (MONDAY + timedelta(days=day)).date())]
    return sorted(lines, key=lambda ln: str(ln.get("ts")))


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is ProcessLookupError


if __name__ == "__main__":
    main()
