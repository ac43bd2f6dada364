"""Thought World from the operator's side: `citizen proposal list`, `proposal show`,
`approve`, `reject`, `consensus start` and `consensus report`."""

from __future__ import annotations

import json
from typing import Any

import click

from citizen import civilization, config
from citizen.admin import approvals
from citizen.cli.options import CitizenName, json_option, operator
from citizen.cli.terminal import age, command, echo, table, wide_option
from shared.consensus import Consensus, Proposal, emergence, listing, render


def _commons() -> Consensus:
    return civilization.consensus(config.templates())


def _wake_next(d: Proposal) -> str:
    """Ring whoever owes the next step (as the operator); says so for the output."""
    return approvals.ring_next(d)


@click.command("proposals")
@click.option("--pending", is_flag=True, help="Only proposals still in progress.")
@click.option("--human", is_flag=True, help="Only proposals waiting for a human decision.")
@wide_option
@json_option
def proposals(pending: bool, human: bool, wide: bool, as_json: bool) -> None:
    """List Thought World proposals (newest last); OPENED is an age, ISO in --json.

    \b
    Example:
      citizen proposal list --human        what waits for `citizen proposal approve|reject`
    """
    rows = listing.rows(_commons(), pending=pending, human=human)
    if as_json:
        echo(json.dumps(rows))
        return
    table(["PROPOSAL", "OPENED", "STATE", "PHASE", "STAKES", "ROUND", "OWED BY", "FLAGS",
           "GOAL"],
          [[r["id"], age(r["opened"]), r["state"], r["phase"], r["stakes"], r["round"],
            r["owed_by"] or "-", r["flags"] or "-", r["goal"]] for r in rows], wide=wide,
          empty=(f"no proposals waiting for a human - all of them: `{command('proposal list')}`"
                 if human else "no proposals - start one with "
                 + "`" + command('proposal start --by NAME "TASK"') + "`"))


@click.group("proposal")
def proposal() -> None:
    """Thought World proposals: list, show, start, approve, reject, report."""


@proposal.command("show")
@click.argument("pid")
@json_option
def show(pid: str, as_json: bool) -> None:
    """Show proposal PID: every round's reasoning, the consensus, execution and outcome."""
    commons = _commons()
    d = commons.load(pid)
    view = render(d)
    if as_json:
        echo(json.dumps(view, indent=1))
        return
    owed = f" (owed by {d.owed_by})" if d.owed_by else ""
    echo(f"{pid}: {view['status']}, at {d.phase}{owed}" + (f" - {d.why}" if d.why else ""))
    echo(f"task:    {view['task'][:300]}")
    echo(f"roles:   {', '.join(f'{k} {v}' for k, v in d.roles.items())}")
    echo(f"stakes:  {d.stakes} ({'; '.join(d.stakes_reasons)})")
    echo(f"cost:    ${view['cost']['total_usd']:.4f} over "
         f"{len(view['cost']['by_step'])} model calls")
    for flag in d.flags:
        echo(f"RED FLAG: {flag}")
    _echo_rounds(view)
    _echo_ending(d)


def _echo_rounds(view: dict[str, Any]) -> None:
    for rnd in view["rounds"]:
        rev = rnd["proposal"]
        echo(f"\n-- round {rnd['round']} ({rev.get('level')}) goal: {rev.get('goal')}")
        for a in rev.get("actions", []):
            echo(f"   action: {a.get('tool')} {json.dumps(a.get('args'))[:200]}")
        for value, why in rev.get("value_justification", {}).items():
            echo(f"   serves {value}: {why}")
        if rev.get("response_to_concerns"):
            echo(f"   response to concerns: {rev['response_to_concerns']}")
        for role in ("verification", "integration"):
            vote = rnd[role]
            if vote:
                who = vote.get("author") or vote.get("citizen")  # views from before "author"
                echo(f"   {who} ({role}): {vote['decision']} - "
                     f"{vote.get('rationale', '')}")
                for concern in vote.get("concerns", []):
                    echo(f"      concern: {concern}")


def _echo_ending(d: Proposal) -> None:
    if d.consensus:
        echo(f"\nconsensus: {json.dumps(d.consensus)}")
    if d.tiebreak:
        echo(f"tiebreak:  {json.dumps(d.tiebreak)}")
    if d.human:
        echo(f"human:     {d.human['operator']} {d.human['decision']} "
             f"{d.human.get('why', '')}")
    if d.execution:
        echo(f"execution: success={d.execution['success']} commit={d.execution['commit']}")
    if d.outcome:
        echo(f"outcome:   verified={d.outcome['outcomes_verified']} "
             f"{d.outcome.get('rationale', '')}")
    if d.episode:
        echo(f"episode:   {d.episode['id']}: {d.episode.get('key_learnings')}")


@click.command("approve")
@click.argument("pid")
@click.option("--why", default="", help="Your reason, kept with the proposal.")
def approve(pid: str, why: str) -> None:
    """Approve proposal PID as a human (high-stakes and escalated proposals wait for this)."""
    d, rang = approvals.decide(pid, True, why, operator())
    echo(f"approved {pid}; next: {d.phase}{rang}")


@click.command("reject")
@click.argument("pid")
@click.option("--why", required=True, help="Why - the citizens learn from it.")
def reject(pid: str, why: str) -> None:
    """Reject proposal PID as a human (any time before it runs)."""
    d, rang = approvals.decide(pid, False, why, operator())
    echo(f"rejected {pid}; next: {d.phase}{rang}")


@click.group("consensus")
def consensus() -> None:
    """Start proposals and look at the collective's history (now `citizen proposal`)."""


@consensus.command("start")
@click.option("--by", "executor", required=True, type=CitizenName(),
              help="The citizen who proposes and executes.")
@click.argument("task")
def start(executor: str, task: str) -> None:
    """Ask citizen EXECUTOR to propose TASK to its peers; rings its doorbell.

    \b
    Example:
      citizen proposal start --by opus "Create hello.md saying 'Hello, thought world!'"
    """
    d = _commons().request(task, executor, operator(), source={"cli": True})
    echo(f"opened {d.id}: {executor} proposes, {d.roles['verifier']} verifies, "
         f"{d.roles['integrator']} integrates{_wake_next(d)}")


@consensus.command("report")
@json_option
def report(as_json: bool) -> None:
    """The seed's six emergence indicators and the Quality Rubric, observed from the
    history (never shown to citizens).

    \b
    Example:
      citizen proposal report --json | jq .value_coherence
    """
    data = emergence.report(_commons())
    if as_json:
        echo(json.dumps(data))
        return
    echo("Emergence indicators (observed after the fact; never shown to citizens)")
    for name, value, target in _indicators(data):
        echo(f" {name:<28} " + (f"{value:<44} target {target}" if target else value))
    means = data["rubric_means"]
    echo(f"\nQuality rubric, 0-5 ({data['rubric_scored']} executed proposals scored; "
         f"{data['rubric_unscored_never_executed']} never executed, unscored)")
    echo(" " + ("  ".join(f"{k} {v}" for k, v in means.items()) if means else "n/a"))
    if data["audit_sample"]:  # the seed's random audits: a person reads these for gaming
        echo(f"\nRandom audit - read these for gaming (`{command('proposal list')}` "
             "shows them): " + ", ".join(data["audit_sample"]))
    echo("\nHistory")
    shown = {"emergent_solutions_rate", "productive_conflict", "memory_citation_rate",
             "value_coherence", "novel_consensus", "metacognitive_depth", "rubric_means",
             "rubric_scored", "rubric_unscored_never_executed", "audit_sample"}
    for key, value in data.items():
        if key not in shown:
            echo(f" {key:<32} {json.dumps(value)}")


def _na(value: Any, fmt: str = "{}") -> str:
    return "n/a" if value is None else fmt.format(value)


def _indicators(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, value, target) of each of the seed's six indicators, for the text report."""
    pc, vc, nc, md, mc = (data["productive_conflict"], data["value_coherence"],
                          data["novel_consensus"], data["metacognitive_depth"],
                          data["memory_citation_rate"])
    weeks = ", ".join(f"{w} {row['mean_depth']}" for w, row in md["by_week"].items())
    cited = ", ".join(f"{w} {row['rate']}" for w, row in mc["by_week"].items())
    return [
        ("1. emergent solutions", _na(data["emergent_solutions_rate"]), "> 0.40"),
        ("2. productive conflict",
         f"{_na(pc['delta_pct'], '{:+}%')} (conflicted {_na(pc['conflicted_mean'])} "
         f"of {pc['conflicted']}, unanimous {_na(pc['unanimous_mean'])} of {pc['unanimous']})",
         "≥ +10%"),
        ("3. integrated memory usage",
         f"{_na(mc['rate'])} overall, trend {_na(mc['trend_per_week'], '{:+}/week')}",
         "rising (0.10 week 1 → 0.50 month 3)"),
        *([("   citing by week", cited, "")] if cited else []),
        ("4. value coherence", f"r {_na(vc['r'])} ({vc['pairs']} pairs)", "r > 0.6"),
        ("5. novel consensus",
         f"{_na(nc['rate'])} ({nc['third_way']} third way of {nc['compromises']} compromises)",
         "≥ 0.20"),
        ("6. metacognitive depth",
         f"mean {_na(md['mean'])}, trend {_na(md['trend_per_week'], '{:+}/week')}",
         "rising"),
        *([("   depth by week", weeks, "")] if weeks else []),
    ]


# `citizen proposal <verb>`: the noun group (the old top-level names are aliases in
# citizen/cli/__init__.py for one release).
for _name, _cmd in (("list", proposals), ("start", start), ("approve", approve),
                    ("reject", reject), ("report", report)):
    proposal.add_command(_cmd, _name)
