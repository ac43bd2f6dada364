"""Structured debates from the operator's side: `citizen debate list`, `citizen debate
start|show|follow|graders`."""

from __future__ import annotations

import json
import time

import click

from citizen import civilization, config
from citizen.cli.options import json_option, operator, ring_as_operator
from citizen.cli.terminal import age, command, echo, table, wide_option
from citizen.config.settings import Budget
from shared.debates import BUDGETS
from shared.debates.summary import summary


@click.command("debates")
@wide_option
@json_option
def debates_cmd(wide: bool, as_json: bool) -> None:
    """List debates: when opened (an age; ISO in --json), stage, whose move, moves, calls,
    cost, seconds from the first move to the last."""
    debates = civilization.debates()
    rows = [summary(debates, debates.load(did)) for did in debates.ids()]
    if as_json:
        echo(json.dumps(rows))
        return
    table(["DEBATE", "OPENED", "STAGE", "NEXT", "MOVES", "CALLS", "USD", "SECONDS", "TOPIC"],
          [[r["id"], age(str(r["opened"] or "")), r["stage"], r["owed_by"] or "-", r["moves"],
            r["calls"], f"{r['cost_usd']:.4f}", r["seconds"], r["topic"]] for r in rows],
          wide=wide, empty="no debates - start one with "
          + "`" + command('debate start --topic "TOPIC" --with NAME,NAME') + "`")


@click.group("debate")
def debate() -> None:
    """Structured debates: list, start, show, follow, graders."""


def _budget(values: tuple[str, ...]) -> dict[str, tuple[int, int]] | None:
    if not values:
        return None
    plan = dict(BUDGETS)
    for v in values:
        stage, _, rng = v.partition("=")
        lo, _, hi = rng.partition("-")
        if stage not in BUDGETS or not lo.isdigit() or not hi.isdigit():
            raise click.BadParameter(f"'{v}': use STAGE=MIN-MAX, e.g. EVIDENCE=4-6 "
                                     f"(stages: {', '.join(BUDGETS)})")
        plan[stage] = (int(lo), int(hi))
    return plan


@debate.command("start")
@click.option("--topic", required=True, help="What to debate.")
@click.option("--with", "people", required=True,
              help="2-5 citizens, comma-separated; the first moves first.")
@click.option("--budget", "budget", multiple=True,
              help="STAGE=MIN-MAX messages (default: the seed's, scaled for more than two).")
@click.option("--max-usd", type=click.FloatRange(0), default=Budget.max_usd_per_debate,
              show_default=True,
              help="End the debate when its moves have cost this much (0: no limit; the "
                   "seed's target is under $0.50).")
def start(topic: str, people: str, budget: tuple[str, ...], max_usd: float) -> None:
    """Start a debate and ring the first participant's doorbell.

    \b
    Example:
      citizen debate start --topic "Tests before features" --with opus,mira,aria
    """
    names = [p.strip() for p in people.split(",") if p.strip()]
    tpl = config.templates()
    d = civilization.debates().start(topic, names, operator(),
                                     personas={n: civilization.persona(tpl, n) for n in names},
                                     budgets=_budget(budget), usd_cap=max_usd)
    who = d.owed_by()
    ring_as_operator(who, "DEBATE", f"debate {d.id} started")
    echo(f"started {d.id} among {', '.join(d.participants)}; {who} moves first. "
         f"Follow it: `{command(f'debate follow {d.id}')}`")


@debate.command("show")
@click.argument("did")
@json_option
def show(did: str, as_json: bool) -> None:
    """Stage, steelman table, commitments, falsifiers and the crux of debate DID."""
    debates = civilization.debates()
    d = debates.load(did)
    info = summary(debates, d)
    crux = debates.result(did) or d.crux()
    if as_json:
        echo(json.dumps({**info, "steelmans": d.steelmans, "commitments": d.commitments,
                               "falsifiers": d.falsifiers, "crux": crux}))
        return
    echo(f"{did}: {d.stage}" + (f" ({d.ended})" if d.ended else "")
         + (f", {d.owed_by()} to move" if d.owed_by() else ""))
    echo(f"topic:     {d.topic}\nquestion:  {d.question or '(none yet)'}")
    echo(f"figures:   {info['moves']} moves, {info['calls']} model calls, "
         f"{info['tokens']} tokens, ${info['cost_usd']:.4f}, {info['seconds']} s")
    echo("steelmans:")
    for s in d.steelmans:
        echo(f"  {s['author']} -> {s['target']} (attempt {s['attempt']}): "
             f"{s['grade'] or 'pending'}")
    echo("commitments:")
    for p, c in d.commitments.items():
        echo(f"  {p}: {c['side']} ({c['confidence']})")
    echo("falsifiers:")
    for p, fs in d.falsifiers.items():
        for f in fs:
            echo(f"  {f['id']} {p}: {f['metric']} {f['threshold']} by {f['deadline']}"
                 f" ({len(d.evidence_on.get(f['id'], []))} evidence)")
    for p, answer in crux["counterfactual"].items():
        echo(f"  would {p}'s TopClaim flip? {answer['why']}")
    echo(f"crux:      {'VALIDATED' if crux['validated'] else 'not validated'}")
    for check in crux["failed_checks"]:
        echo(f"  failed: {check}")
    for c in crux["resolution_criteria"]:
        echo(f"  resolves on: {c}")
    if crux["cheap_concessions"]:
        echo(f"  cheap concessions: {', '.join(crux['cheap_concessions'])}")


@debate.command("follow")
@click.argument("did")
@click.option("--timeout", type=float, default=0.0, help="Stop after this many seconds.")
@json_option
def follow(did: str, timeout: float, as_json: bool) -> None:
    """Print debate DID's events as they happen, until it completes (or --timeout)."""
    debates = civilization.debates()
    debates.thread(did)  # a clear error for an unknown id
    seen, deadline = 0, time.monotonic() + timeout if timeout else float("inf")
    while time.monotonic() < deadline:
        events = debates.events(did)
        for e in events[seen:]:
            if as_json:
                echo(json.dumps(e))
                continue
            detail = {k: v for k, v in e.items() if k not in ("ts", "type", "seq", "stage")}
            echo(f"#{e.get('seq', 0):<3} {e.get('stage', ''):<9} {e['type']:<18} "
                 f"{json.dumps(detail)[:160]}")
        seen = len(events)
        if any(e["type"] == "debate_complete" for e in events):
            return
        time.sleep(0.2)


@debate.command("graders")
@wide_option
@json_option
def graders(wide: bool, as_json: bool) -> None:
    """Each grader's steelman grades over every debate; LENIENT: more than 90 % ACCURATE
    over at least 10 grades (the plan's risk: steelmans always graded ACCURATE)."""
    rows = [{"grader": who, **g} for who, g in civilization.debates().graders().items()]
    if as_json:
        echo(json.dumps(rows))
        return
    table(["GRADER", "ACCURATE", "GRADED", "RATE", "VERDICT"],
          [[r["grader"], r["accurate"], r["graded"], f"{r['rate']:.0%}",
            f"LENIENT: {r['why']}" if r["lenient"] else "ok"] for r in rows], wide=wide,
          empty="no steelman graded yet - debates grade them: "
          f"`{command('debate list')}` shows where each stands")


debate.add_command(debates_cmd, "list")
