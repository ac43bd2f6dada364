"""`citizen cost`: what the model calls cost, from every citizen's spend ledger."""

from __future__ import annotations

import json
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


def table(days: int, by: str) -> list[dict[str, Any]]:
    """One row per group: dollars, calls, tokens and the cached share of prompt tokens."""
    homes = [paths.home(name) for name in civilization.citizens()]
    return [{by: r.pop(GROUPS[by]), **r} for r in spend.totals(homes, days, (GROUPS[by],))]


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
