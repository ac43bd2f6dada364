"""bench/evolution.py's figures: read from a scenario's records, wake logs, the broker's
ledger and the stand-in's log, then printed (medians, p95s, the issue's goals)."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.stats import pct, peak, show

GOAL_VERIFIED_S = 600.0  # announce → verified at 1,000 citizens on 2 cores (issue 43)
Wakes = dict[str, list[dict[str, Any]]]  # citizen -> its wakes, oldest first


def clock_s(stamp: object) -> float:
    """An ISO stamp of the records or logs as epoch seconds."""
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


def wakes(civ: Path, names: list[str]) -> Wakes:
    """Each citizen's wakes from its logs: start, end, status, first gate, code_test calls
    (change, start, end: the event is written as the call returns, with its duration)."""
    out: Wakes = {}
    for name in names:
        for log in sorted((civ / name / "logs" / "wakes").glob("*.jsonl")):
            wake: dict[str, Any] = {"tests": []}
            for line in log.read_text().splitlines():
                e = json.loads(line)
                if e["event"] == "wake_start":
                    wake["start"] = clock_s(e["ts"])
                elif e["event"] == "gate" and "gate" not in wake:
                    wake["gate"] = str(e.get("reason", ""))
                elif e["event"] == "wake_end":
                    wake["end"], wake["status"] = clock_s(e["ts"]), e.get("status")
                elif e["event"] == "tool_call" and e.get("tool") == "code_test":
                    end = clock_s(e["ts"])
                    wake["tests"].append(((e.get("args") or {}).get("change_id"),
                                          end - float(e["duration_s"]), end))
            out.setdefault(name, []).append(wake)
    return out


def ledger(civ: Path) -> tuple[int, float]:
    """The broker's ledger (its authoritative figure): calls and dollars."""
    path = civ / ".broker" / "ledger.db"
    if not path.exists():
        return 0, 0.0
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        calls, usd = db.execute(
            "SELECT count(*), coalesce(sum(cost_usd), 0) FROM calls").fetchone()
    return int(calls), float(usd)


def measure(civ: Path, names: list[str], cid: str, calls: list[dict[str, Any]],
            logs: Wakes) -> dict[str, Any]:
    """One change's figures from its records, the wake logs and the stand-in's log."""
    from shared.evolution import Evolution

    change = Evolution(civ / "shared", names, False).get(cid)
    runs = [json.loads(p.read_text())
            for p in (civ / "shared" / "changes" / cid / "runs").glob("*.json")]
    spans = [(a, b) for ws in logs.values() for w in ws for c, a, b in w["tests"] if c == cid]
    announced = clock_s(change.announced)
    runners = {str(r["author"]) for r in runs}
    # A drawn reviewer without a run: its first wake after the announcement opened on the
    # adoption alone - two reports had verified the change before it began.
    late = []
    for name in set(change.order[:change.k]) - runners:
        first = next((w for w in logs.get(name, []) if w.get("start", 0) >= announced - 1),
                     None)
        if first is not None and "test" not in first.get("gate", "").rsplit("(", 1)[-1]:
            late.append(name)
    worked = sorted(clock_s(change.reports[w]["ts"]) for w, o in change.counted.items()
                    if o == "worked")
    verified = worked[1] if len(worked) >= 2 else None
    mine = [c for c in calls if cid in c["changes"]]
    # The herd's cost: calls about it before it was verified by citizens not drawn for it.
    herd = [c for c in mine if c["who"] not in change.reviewers
            and (verified is None or c["t"] < verified)]
    return {
        "id": cid, "author": change.citizen, "status": change.status, "k": change.k,
        "runs": len(runs), "runners": sorted(runners), "late": sorted(late),
        "reviewers": change.reviewers, "peak": peak(spans), "spans": spans,
        "calls": len(mine), "herd": len(herd),
        "usd": sum(c["usd"] / len(c["changes"]) for c in mine),
        "outcome_calls": sum(c["purpose"] == "review_outcome" for c in mine),
        "adopt_calls": sum(c["purpose"] == "review_adopt" for c in mine),
        # Who was asked to adopt (once each, the goal): a question the merge overtook
        # leaves no record, yet it was asked.
        "asked": sorted({c["who"] for c in mine if c["purpose"] == "review_adopt"}),
        "adopters": sorted(change.adoptions), "declines": sorted(change.declines),
        "to_verified": verified - announced if verified else None,
        "to_merged": (clock_s(change.merged["ts"]) - (verified or announced)
                      if change.merged else None),
    }


def line(label: str, value: object, note: str = "") -> None:
    print(f"{label:<52} {value!s:>9}{'  ' + note if note else ''}")


def report(r: dict[str, Any]) -> None:
    """One scenario: a row per change, then its medians and the whole run's figures."""
    changes, calls = r["changes"], r["calls"]
    how = (f"the scheduler (run --all --scheduler, --parallel {r['parallel']})"
           if r["scheduler"] else "a daemon each (citizen run NAME)")
    print(f"\n## N = {r['n']}, {r['label']}: {how}")
    line("founded (s); citizens up (s)", f"{r['made_s']:.1f}",
         f"{r['up_s']:.1f} s; {r['alive']} of {r['procs']} processes running")
    if r.get("idle"):
        span_s, idle_calls, (lcalls, lusd) = r["idle"]
        line(f"idle {span_s:.0f} s, nothing announced: model calls", len(idle_calls),
             f"${sum(c['usd'] for c in idle_calls):.2f} (ledger: {lcalls} calls, ${lusd:.2f})")
    print(f"{'change':<17} {'author':<6} {'runs':>4} {'peak':>4} {'calls':>5} {'test':>4} "
          f"{'adopt':>5} {'$':>7} {'ann→ver':>7} {'ver→mrg':>7} {'adopted':>7}  status")
    for c in changes:
        print(f"{c['id']:<17} {c['author']:<6} {c['runs']:>4} {c['peak']:>4} {c['calls']:>5} "
              f"{c['outcome_calls']:>4} {c['adopt_calls']:>5} {c['usd']:>7.4f} "
              f"{fmt(c['to_verified']):>7} {fmt(c['to_merged']):>7} {len(c['adopters']):>7}  "
              f"{c['status']}")
    if not changes:
        return
    show("test runs per change", [float(c["runs"]) for c in changes], "runs")
    late = sum(len(c["late"]) for c in changes)
    line("  drawn reviewers whose wake began after it was verified", late)
    show("peak concurrent test runs of a change", [float(c["peak"]) for c in changes], "runs")
    line("peak concurrent test runs, all changes", peak([s for c in changes for s in c["spans"]]))
    busy = [(w["start"], w["end"]) for ws in r["wakes"].values() for w in ws
            if "end" in w and w.get("status") != "idle"]
    line("wakes with work; the most at once", len(busy), f"{peak(busy)} at once")
    show("model calls naming a change", [float(c["calls"]) for c in changes], "calls")
    show("$ per change (a batched question split)", [c["usd"] for c in changes], "$")
    ver = [c["to_verified"] for c in changes if c["to_verified"] is not None]
    if ver:
        show("announce → verified (whole-second stamps)", ver, "s")
    mrg = [c["to_merged"] for c in changes if c["to_merged"] is not None]
    if mrg:
        show("verified → merged", mrg, "s")
    lcalls, lusd = r["ledger"]
    usd = sum(c["usd"] for c in calls)
    line("model calls after the first announcement", len(calls),
         f"${usd:.4f}; {len(calls) / len(changes):.1f} calls a change (ledger, the whole "
         f"run: {lcalls} calls, ${lusd:.4f})")
    for key in ("purpose", "model"):
        seen = sorted({str(c[key]) for c in calls})
        line(f"  by {key}", "", ", ".join(f"{v} {sum(c[key] == v for c in calls)}" for v in seen))
    batches = [c for c in calls if c["batch"]]
    if batches:
        line("  adoption questions naming several changes", len(batches),
             f"{sum(len(c['changes']) for c in batches) / len(batches):.1f} changes each")
    involved = {w for c in changes for w in (*c["reviewers"], *c["runners"], *c["adopters"],
                                             *c["declines"], c["author"])}
    line("model calls of citizens neither reviewing nor deciding",
         sum(c["who"] not in involved for c in calls), f"({r['n'] - len(involved)} such citizens)")
    line("calls about a change by the undrawn, before verified", sum(c["herd"] for c in changes))
    line("model calls naming no change", sum(not c["changes"] for c in calls))
    raced = sum(a["raced"] for a in r["announced"])
    if raced:
        line("announcements that raced an adoption (not the change)", raced)
    line(f"settled ({r['until']}) before the timeout", r["finished"],
         f"{r['wall_s']:.0f} s after the first announcement")


def goals(results: list[dict[str, Any]]) -> None:
    """The issue's goals, each with the figure that decides it."""
    print("\n## Goals (issue 43), each with the figure that decides it")
    for r in results:
        changes = r["changes"]
        if not changes:
            continue
        tag = f"N={r['n']}, {r['label']}:"
        runs, k = [c["runs"] for c in changes], changes[0]["k"]
        late = sum(len(c["late"]) for c in changes)
        line(f"{tag} test runs a change = k ({k})", f"{min(runs)}..{max(runs)}",
             f"{'met' if set(runs) == {k} else 'NOT met'}; none above k: "
             f"{'yes' if max(runs) <= k else 'NO'}; {late} drawn came after the verification")
        def deciders(c: dict[str, Any]) -> int:  # recorded, or asked and overtaken
            return len(set(c["adopters"]) | set(c["declines"]) | set(c["asked"]))

        over = [c for c in changes if c["calls"] > c["k"] + deciders(c)]
        worst = max(changes, key=lambda c: c["calls"] - deciders(c))
        line(f"{tag} calls ≤ k + one a decider (worst)", worst["calls"],
             f"≤ {worst['k'] + deciders(worst)}: "
             f"{'met' if not over else f'NOT met for {len(over)}'}")
        ver = [c["to_verified"] for c in changes if c["to_verified"] is not None]
        if ver:
            met = max(ver) <= GOAL_VERIFIED_S and len(ver) == len(changes)
            line(f"{tag} announce → verified ≤ 600 s (max)", f"{max(ver):.0f} s",
                 f"p95 {pct(ver, 0.95):.0f} s, {len(ver)}/{len(changes)} verified: "
                 f"{'met' if met else 'NOT met'}")
        else:
            line(f"{tag} announce → verified ≤ 600 s", "-", "none verified: NOT met")
        if r.get("idle"):
            idle_calls = r["idle"][1]
            usd = sum(c["usd"] for c in idle_calls)
            line(f"{tag} idle {r['idle'][0]:.0f} s at $0.00", f"${usd:.2f}",
                 f"{len(idle_calls)} calls: {'met' if not idle_calls else 'NOT met'}")


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
