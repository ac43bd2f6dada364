"""`citizen broker run|status` and `citizen spend`: the broker and its ledger."""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
from collections import defaultdict
from datetime import timedelta
from typing import Any

import click

from citizen.access.client import reachable
from citizen.broker import service
from citizen.broker.ledger import LedgerUnavailable
from citizen.broker.spend import calls_since
from citizen.cli.options import json_option
from citizen.cli.terminal import command, echo, table, wide_option
from citizen.config import paths, server_mode
from shared import clock
from shared.errors import LockTimeout


@click.group()
def broker() -> None:
    """The broker: the process that holds the keys, the caps and the ledger.

    \b
    Examples:
      systemctl status experience-broker     on a server, systemd runs it
      citizen broker run                     in the foreground (dev mode starts it itself)
      citizen broker status
    """


@broker.command("run")
@click.option("--idle-exit", type=float, default=None,
              help="Stop after this many seconds without a call (dev mode).")
def run(idle_exit: float | None) -> None:
    """Run the broker in the foreground until stopped."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, force=True,
                        format="%(levelname)s broker %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per call is ours
    try:
        service.serve(idle_exit_s=idle_exit)
    except LockTimeout as exc:
        raise click.ClickException(f"another broker already serves {service.ledger_path()} "
                                   "- stop it first (systemctl stop experience-broker)") from exc


@broker.command("status")
@wide_option
@json_option
def status(wide: bool, as_json: bool) -> None:
    """Whether the broker answers, and where its socket and ledger are."""
    info = {"socket": str(paths.broker_socket()), "ledger": str(service.ledger_path()),
            "answering": reachable(paths.broker_socket())}
    if as_json:
        echo(json.dumps(info))
        return
    ledger = service.ledger_path()
    table(["WHAT", "STATE", "PATH"],
          [["socket", "answering" if info["answering"] else "DOWN", info["socket"]],
           ["ledger", "present" if ledger.exists() else "none yet", info["ledger"]]], wide=wide)
    if not info["answering"]:
        # In dev mode a model call starts it too; this is the way without one.
        echo("start it: " + ("`sudo systemctl start experience-broker`" if server_mode() else
                             f"`{command('broker run')}`"))


def ledger_rows(days: int) -> list[dict[str, Any]]:
    """The broker's ledger from `days` days ago on (read-only).

    :raises click.ClickException: it cannot be read (names who can).
    """
    path = service.ledger_path()
    since = (clock.today() - timedelta(days=days - 1)).isoformat()
    try:
        return calls_since(paths.broker_state(), since)
    except LedgerUnavailable as exc:
        raise click.ClickException(str(exc)) from exc
    except sqlite3.Error as exc:
        raise click.ClickException(
            f"cannot read the broker's ledger {path} ({exc}) - on a server run this as root; "
            "no ledger yet means no call went through the broker") from exc


@click.command()
@click.option("--days", type=int, default=1, show_default=True, help="Days back, today included.")
@wide_option
@json_option
def spend(days: int, wide: bool, as_json: bool) -> None:
    """What the broker let through: dollars per citizen and day, from its ledger.

    Open reservations count at their worst case; calls the upstream refused, at $0.
    CACHED: the share of the prompt tokens the upstream read from its cache (the
    stable prefix of a wake's calls; a cache read costs a tenth of the input price).

    \b
    Examples:
      citizen spend
      citizen spend --days 30 --json
    """
    totals: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"usd": 0.0, "calls": 0, "open": 0, "prompt_tokens": 0, "cache_read": 0})
    for row in ledger_rows(days):
        if row["state"] == "refused":  # never forwarded: not what the broker let through
            continue
        t = totals[(row["day"], row["citizen"])]
        t["calls"] += 1
        if row["state"] == "reserved":
            t["open"] += 1
            t["usd"] += row["reserved"]
        else:
            t["usd"] += row["cost"] or 0.0
        read = row["cache_read"] or 0
        t["cache_read"] += read
        t["prompt_tokens"] += (row["tokens_in"] or 0) + (row["cache_write"] or 0) + read
    out = [{"day": d, "citizen": c, **v, "usd": round(v["usd"], 6),
            "cached_share": round(v["cache_read"] / v["prompt_tokens"], 4)
            if v["prompt_tokens"] else 0.0}
           for (d, c), v in sorted(totals.items())]
    if as_json:
        echo(json.dumps(out))
        return
    table(["DAY", "CITIZEN", "USD", "CALLS", "OPEN", "CACHED"],
          [[r["day"], r["citizen"], f"{r['usd']:.4f}", r["calls"], r["open"],
            f"{r['cached_share']:.0%}"] for r in out],
          wide=wide, empty=f"no model call went through the broker in the last {days} day(s) "
                           f"- look further back: `{command(f'spend --days {max(30, days * 2)}')}`")
