"""What bench/month.py measured and how it prints it: the month's cast and calendar, the
figures read back from the citizens' homes (ledger, wake logs, tasks, contexts, disk), the
per-day table, the issue's goals, the backups' figures and the evolution loop's. Nothing
here asserts."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

CITIZENS = ("opus", "mira", "aria")
RUNAWAY = "rex"
MONDAY = datetime(2026, 1, 5, tzinfo=UTC)  # world day 0
REFUSED = ("daily_cap", "budget")  # wake endings that mean "refused for budget"


# ------------------------------------------------------------------ what the homes hold


def disk(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink())


def contexts(name: str) -> int:
    from citizen.config import paths

    return sum(f.stat().st_size for f in paths.home(name).contexts.glob("*") if f.is_file())


def ledger(name: str, day: date) -> list[dict[str, Any]]:
    from citizen.config import paths
    from citizen.home import spend

    return spend.lines(paths.home(name), day)


def refusals(name: str) -> list[tuple[str, str, str]]:
    """(world date, wake type, reason) of every wake that ended refused for budget."""
    from citizen.config import paths
    from citizen.home import wakelog

    out = []
    for path in sorted(paths.home(name).wake_logs.glob("*.jsonl")):
        events = wakelog.read(path)
        end = next((e for e in reversed(events) if e["event"] == "wake_end"), None)
        if end and end.get("status") in REFUSED:
            out.append((str(end.get("ts", ""))[:10], path.stem.split("-", 1)[1],
                        str(end.get("reason", ""))[:90]))
    return out


def debates(name: str) -> tuple[dict[str, int], dict[str, int]]:
    """Per world date: the debates `name` opened, and its debate_start calls refused."""
    from citizen.config import paths
    from citizen.home import wakelog

    home = paths.home(name)
    opened = {p.stem: len(p.read_text().splitlines())
              for p in (home.dir / "logs" / "spend").glob("*.debates")}
    refused: dict[str, int] = defaultdict(int)
    for path in wakelog.wake_logs(home):
        for e in wakelog.read(path):
            if e.get("event") == "tool_call" and e.get("tool") == "debate_start" \
                    and not str(e.get("result", "")).startswith("started"):
                refused[str(e["ts"])[:10]] += 1
    return opened, refused


def tasks_done(name: str, day: date) -> int:
    """How many of the tasks `name` was given on `day` are done."""
    from citizen.config import paths
    from citizen.home.tasks import TaskQueue

    queue = TaskQueue(paths.home(name).tasks)
    return sum(1 for tid in queue.ids("done")
               if queue.load("done", tid).created[:10] == day.isoformat())


# ------------------------------------------------------------------ the report


def report(args: argparse.Namespace, fed: dict[int, list[str]],
           snaps: dict[int, tuple[int, dict[str, int]]], work: Path) -> list[dict[str, Any]]:
    names = (*CITIZENS, RUNAWAY)
    purposes = ("execute", "select_tools", "route", "task_deliverables", "verify_task")
    print(f"\n{'day':>3} {'kind':<5} {'$ civ':>7} {'$ rex':>6} {'calls':>5} {'tasks':>5} "
          f"{'$/task':>6} " + " ".join(f"{p[:8]:>8}" for p in purposes)
          + f" {'other':>6} {'cached':>6} {'exec':>5} {'ctx KB':>6} {'disk Δ KB':>9} "
          f"{'rex debates':>11}  refused")
    per_day: list[dict[str, Any]] = []
    refused = {n: refusals(n) for n in names}
    opened, denied = debates(RUNAWAY)
    for day in sorted(snaps):
        when = (MONDAY + timedelta(days=day)).date()
        lines = {n: ledger(n, when) for n in names}
        civ = [ln for n in CITIZENS for ln in lines[n]]
        everyone = civ + lines[RUNAWAY]
        cost = sum(float(ln.get("cost_usd", 0)) for ln in civ)
        rex = sum(float(ln.get("cost_usd", 0)) for ln in lines[RUNAWAY])
        done = sum(tasks_done(n, when) for n in CITIZENS)
        task_cost = sum(float(ln.get("cost_usd", 0)) for ln in civ
                        if ln.get("wake_type") == "TASK")
        by: dict[str, list[int]] = defaultdict(list)
        prompt = cached = exec_prompt = exec_cached = 0
        for ln in everyone:
            size = int(ln.get("tokens_in", 0)) + int(ln.get("cache_read", 0)) \
                + int(ln.get("cache_write", 0))
            by[str(ln.get("purpose")) if ln.get("purpose") in purposes else "other"].append(size)
            prompt += size
            cached += int(ln.get("cache_read", 0))
            if ln.get("purpose") == "execute":
                exec_prompt += size
                exec_cached += int(ln.get("cache_read", 0))
        disk_written, ctx = snaps[day]
        key = when.isoformat()
        row: dict[str, Any] = {
               "day": day + 1, "idle": not fed[day], "usd": cost, "usd_rex": rex,
               "calls": len(everyone), "tasks": done,
               "usd_per_task": task_cost / done if done else 0.0,
               "prompt_per_call": {p: (sum(v) / len(v) if v else 0) for p, v in by.items()},
               "cached_share": cached / prompt if prompt else 0.0,
               "execute_cached_share": exec_cached / exec_prompt if exec_prompt else 0.0,
               "context_kb": max(ctx.values()) / 1024, "disk_kb": disk_written / 1024,
               "rex_debates": opened.get(key, 0), "rex_debates_refused": denied.get(key, 0),
               "spent_on": sorted({str(ln.get("wake_type")) for ln in everyone}),
               "refused": [(n, r) for n in names for r in refused[n] if r[0] == key]}
        per_day.append(row)
        ppc = row["prompt_per_call"]
        print(f"{row['day']:>3} {'idle' if row['idle'] else 'busy':<5} {cost:7.3f} {rex:6.3f} "
              f"{row['calls']:>5} {done:>5} {row['usd_per_task']:6.3f} "
              + " ".join(f"{ppc.get(p, 0):8.0f}" for p in purposes)
              + f" {ppc.get('other', 0):6.0f} {row['cached_share']:6.0%} "
              f"{row['execute_cached_share']:5.0%} {row['context_kb']:6.1f} "
              f"{row['disk_kb']:9.0f} {row['rex_debates']:>4} +{row['rex_debates_refused']:<3} "
              "refused  " + "; ".join(f"{n} {r[1]}: {r[2][:50]}" for n, r in row["refused"]))
    goals(per_day, refused)
    (work / "month.json").write_text(json.dumps(per_day, indent=1, default=str))
    print(f"\nthe table as JSON: {work / 'month.json'}")
    return per_day


def goals(per_day: list[dict[str, Any]], refused: dict[str, list[tuple[str, str, str]]]) -> None:
    busy = [r for r in per_day if r["tasks"]]
    print("\ngoals:")
    for r in per_day:
        if r["idle"]:
            after = "after an idle day" if per_day[r["day"] - 2]["idle"] else "after work"
            print(f"  idle day {r['day']} ({after}): ${r['usd'] + r['usd_rex']:.4f}, "
                  f"{r['calls']} calls ({', '.join(r['spent_on']) or 'none'})")
    if len(busy) >= 2:
        first, last = busy[0]["usd_per_task"], busy[-1]["usd_per_task"]
        print(f"  day {busy[-1]['day']}'s cost per task within 20 % of day {busy[0]['day']}'s: "
              f"${last:.4f} vs ${first:.4f} ({(last / first - 1) if first else 0:+.1%})")
    shares = sorted(r["cached_share"] for r in per_day if r["calls"] > 5)
    execs = sorted(r["execute_cached_share"] for r in per_day if r["calls"] > 5)
    if shares:
        print(f"  cached share of prompt tokens (goal ≥ 80 %): median "
              f"{shares[len(shares) // 2]:.0%} (execute calls {execs[len(execs) // 2]:.0%}), "
              f"lowest {shares[0]:.0%}")
    fair = [(n, r) for n in CITIZENS for r in refused[n]]
    print(f"  wakes of the three refused for budget: {len(fair)}"
          + "".join(f"\n    {n} {d} {t}: {why}" for n, (d, t, why) in fair[:5]))
    rex = [r["usd_rex"] for r in per_day]
    print(f"  the runaway: ${sum(rex):.2f} in all, most in a day ${max(rex, default=0):.2f}; "
          f"debates opened a day at most {max(r['rex_debates'] for r in per_day)} "
          f"(budget.max_debates_per_day), {sum(r['rex_debates_refused'] for r in per_day)} "
          f"more refused; its wakes refused for budget: {len(refused[RUNAWAY])}; the three "
          f"did {sum(r['tasks'] for r in per_day if r['rex_debates'])} tasks meanwhile")


def report_backups(root: Path, backups: dict[int, dict[str, float]]) -> None:
    from citizen.config import paths

    logs = {n: disk(paths.home(n).dir / "logs") for n in (*CITIZENS, RUNAWAY)}
    print("\nbackups (`citizen backup now` at the end of each world day, daemons running):")
    print("(seconds: the command's wall time, which includes waiting for running wakes to end;"
          " restic: the snapshot itself)")
    print(f"{'day':>3} {'seconds':>7} {'restic':>6} {'added KB':>8} {'repo MB':>7}  quiescent")
    for day, b in sorted(backups.items()):
        print(f"{day + 1:>3} {b['seconds']:7.2f} {b.get('restic', 0):6.2f} "
              f"{b['added'] / 1024:8.0f} "
              f"{b['repo'] / 2**20:7.2f}  {'yes' if b.get('quiescent') else 'NO'}"
              + ("" if b["ok"] else "  FAILED"))
    times = sorted(b["seconds"] for b in backups.values())
    restic = sorted(b.get("restic", 0.0) for b in backups.values())
    files = sum(1 for f in root.rglob("*") if f.is_file())
    print(f"  the civilization after {len(backups)} days: {disk(root) / 2**20:.1f} MB in "
          f"{files} files (logs and blobs {sum(logs.values()) / 2**20:.2f} MB); a backup "
          f"median {times[len(times) // 2]:.2f} s, p95 {times[int(len(times) * 0.95)]:.2f} s, "
          f"first {backups[min(backups)]['seconds']:.2f} s (restic alone: median "
          f"{restic[len(restic) // 2]:.2f} s, p95 {restic[int(len(restic) * 0.95)]:.2f} s); "
          "repository "
          f"{backups[max(backups)]['repo'] / 2**20:.1f} MB")



def review_wakes(name: str) -> dict[str, list[int]]:
    """Per world date: `name`'s REVIEW wakes that ran, and those its gate kept idle."""
    from citizen.config import paths
    from citizen.home import wakelog

    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for path in wakelog.wake_logs(paths.home(name)):
        if "REVIEW" not in path.name:
            continue
        events = wakelog.read(path)
        if not events:  # a wake killed before its first line
            continue
        end: dict[str, Any] = next((e for e in reversed(events) if e["event"] == "wake_end"), {})
        out[str(events[0].get("ts", ""))[:10]][end.get("status") == "idle"] += 1
    return out


def report_evolution(per_day: list[dict[str, Any]], fed: dict[int, list[str]],
                     announced: int) -> None:
    """The loop's cost by day (REVIEW wakes: no task queued), the announced day beside a
    day of the same stream with nothing announced, and the idle days."""
    from citizen import civilization

    names = (*CITIZENS, RUNAWAY)
    wakes = {n: review_wakes(n) for n in names}
    what = f"opus announced a change on day {announced}" if announced else "nothing announced"
    print(f"\nthe evolution loop ({what}; no task asks for a review):")
    print(f"{'day':>3} {'kind':<8} {'$ all':>7} {'calls':>5} {'$ REVIEW':>8} "
          f"{'REVIEW calls':>12}  REVIEW wakes ran/idle")
    loop: dict[int, tuple[float, int]] = {}
    for r in per_day:
        key = (MONDAY + timedelta(days=r["day"] - 1)).date()
        lines = [ln for n in names for ln in ledger(n, key) if ln.get("wake_type") == "REVIEW"]
        loop[r["day"]] = (sum(float(ln.get("cost_usd", 0)) for ln in lines), len(lines))
        ran = sum(wakes[n][key.isoformat()][0] for n in names)
        idle = sum(wakes[n][key.isoformat()][1] for n in names)
        kind = ("idle" if r["idle"] else "busy") + ("+ann" if r["day"] == announced else "")
        print(f"{r['day']:>3} {kind:<8} {r['usd'] + r['usd_rex']:7.4f} {r['calls']:>5} "
              f"{loop[r['day']][0]:8.4f} {loop[r['day']][1]:>12}  {ran}/{idle}")
    spent = [d for d in loop if loop[d][1]]
    print(f"  REVIEW in all: ${sum(v[0] for v in loop.values()):.4f} in "
          f"{sum(v[1] for v in loop.values())} calls, on days "
          f"{', '.join(map(str, spent)) or 'none'}")
    for c in civilization.commons().evolution.changes():
        got = c.summary()
        print(f"  change {got['id']} by {got['citizen']}: {got['status']}; reports "
              f"{got['reports'] or 'none'}; adopted by {', '.join(got['adopted_by']) or '-'}"
              f"; declined by {', '.join(got['declined_by']) or '-'}")

    def stream(day: int) -> tuple[str, ...]:
        return tuple(sorted(f.split(":")[0] for f in fed[day - 1] if f != "announce"))

    rows = {r["day"]: r for r in per_day}
    same = [d for d in rows if d != announced and not rows[d]["idle"]
            and stream(d) == stream(announced)]
    if announced in rows:
        with_ = rows[announced]["usd"] + rows[announced]["usd_rex"]
        print(f"  with the change (day {announced}): ${with_:.4f}, of which REVIEW "
              f"${loop[announced][0]:.4f} in {loop[announced][1]} calls")
        for d in sorted(same, key=lambda d: abs(d - announced))[:1]:
            without = rows[d]["usd"] + rows[d]["usd_rex"]
            print(f"  the same stream without (day {d}): ${without:.4f}, of which REVIEW "
                  f"${loop[d][0]:.4f} in {loop[d][1]} calls "
                  f"(the change: {(with_ / without - 1) if without else 0:+.1%})")
    for r in per_day:
        if r["idle"]:
            print(f"  idle day {r['day']}: ${r['usd'] + r['usd_rex']:.4f}, {r['calls']} calls, "
                  f"REVIEW ${loop[r['day']][0]:.4f} in {loop[r['day']][1]} calls")
