"""`citizen cost`: what the model calls cost, from every citizen's spend ledger."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import click

from citizen import civilization
from citizen.cli import terminal
from citizen.cli.options import json_option
from citizen.cli.terminal import command, echo
from citizen.config import paths
from citizen.home import spend

GROUPS = {"citizen": "citizen", "wake-type": "wake_type", "model": "model",
          "purpose": "purpose", "day": "day"}
FIELDS = ("tokens_in", "tokens_out", "cache_read", "cache_write")


def table(days: int, by: str) -> list[dict[str, Any]]:
    """One row per group: dollars, calls, tokens and the cached share of prompt tokens."""
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: {"usd": 0.0, "calls": 0,
                                                           **dict.fromkeys(FIELDS, 0)})
    for name in civilization.citizens():
        for day in spend.days(days):
            for line in spend.lines(paths.home(name), day):
                key = {"citizen": name, "day": day.isoformat()}.get(
                    GROUPS[by], str(line.get(GROUPS[by], "?")))
                row = rows[key]
                row["usd"] += float(line.get("cost_usd", 0.0))
                row["calls"] += 1
                for f in FIELDS:
                    row[f] += int(line.get(f, 0))
    out = []
    for key in sorted(rows):
        row = rows[key]
        prompt = row["tokens_in"] + row["cache_read"] + row["cache_write"]
        out.append({by: key, **row, "usd": round(row["usd"], 6),
                    # what a call carries on average: the figure that must plateau
                    "prompt_per_call": round(prompt / row["calls"]) if row["calls"] else 0,
                    "cached_share": round(row["cache_read"] / prompt, 3) if prompt else 0.0})
    return out


@click.command()
@click.option("--days", type=click.IntRange(1, 3650), default=1, show_default=True,
              help="UTC days back from today, today included.")
@click.option("--by", type=click.Choice(list(GROUPS)), default="citizen", show_default=True)
@terminal.wide_option
@json_option
def cost(days: int, by: str, wide: bool, as_json: bool) -> None:
    """Dollars, calls, tokens in/out, cache read/write, the cached share and the prompt
    tokens an average call carries, per group.

    Every model call - in wakes, memory roll-ups and `citizen ask` alike - is in its
    citizen's ledger (logs/spend/<day>.jsonl), so this is the whole bill.

    \b
    Examples:
      citizen cost
      citizen cost --days 30 --by day
      citizen cost --days 7 --by purpose --json
    """
    rows = table(days, by)
    if as_json:
        echo(json.dumps(rows, indent=2))
        return
    cells: list[list[object]] = [
        [r[by], f"{r['usd']:.4f}", r["calls"], r["tokens_in"], r["tokens_out"],
         r["cache_read"], r["cache_write"], f"{r['cached_share']:.1%}", r["prompt_per_call"]]
        for r in rows]
    if rows:
        cells.append(["total", f"{sum(r['usd'] for r in rows):.4f}",
                      sum(r["calls"] for r in rows), *[""] * 6])
    terminal.table([by.upper(), "USD", "CALLS", "IN", "OUT", "CACHE RD", "CACHE WR", "CACHED",
                    "PROMPT/CALL"], cells, wide=wide,
                   empty=f"no model calls in the last {days} day(s) - look further back: "
                         f"`{command(f'cost --days {min(max(30, days * 2), 3650)}')}`")
