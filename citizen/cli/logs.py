"""`citizen logs`: a table of a citizen's wakes, or a readable transcript of one wake."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from citizen.cli.options import citizen_argument, json_option
from citizen.cli.terminal import clean
from citizen.config import paths
from citizen.home import wakelog


def _line(e: dict[str, Any]) -> str:  # noqa: PLR0911 - one readable line per event kind
    ev, ts = e.get("event", "?"), e.get("ts", "")[11:19]
    if ev == "wake_start":
        return (f"{ts} wake {e['wake']} {e.get('type')} started ({e.get('reason')}), "
                f"pid {e.get('pid')}")
    if ev == "gate":
        return f"{ts} gate: {e.get('verdict')} - {e.get('reason')}"
    if ev == "llm_call":
        if "error" in e:
            return f"{ts}   model [{e.get('purpose')}] output rejected: {e['error']}"
        reply = e.get("reply", {})
        calls = ", ".join(f"{c['name']}({json.dumps(c['input'])[:80]})"
                          for c in reply.get("tool_calls", []))
        said = (reply.get("text") or "").strip().replace("\n", " ")[:160]
        return (f"{ts}   model [{e.get('purpose')}] {e.get('model')}: {e.get('tokens_in')} in, "
                f"{e.get('tokens_out')} out, ${e.get('cost_usd', 0):.4f}, "
                f"{e.get('latency_s')} s" + (f"\n           says: {said}" if said else "")
                + (f"\n           calls: {calls}" if calls else ""))
    if ev == "tool_call":
        flag = " (cached)" if e.get("cached") else (" ERROR" if e.get("error") else "")
        result = str(e.get("result", "")).replace("\n", " ")[:140]
        return (f"{ts}   tool {e.get('tool')}{flag} {json.dumps(e.get('args'))[:100]}\n"
                f"           -> {result}")
    if ev == "error":
        return f"{ts} ERROR {e.get('error')}\n{e.get('traceback', '')}"
    if ev == "wake_end":
        return (f"{ts} wake ended: {e.get('status')}"
                f"{' - ' + e['reason'] if e.get('reason') else ''} "
                f"(${e.get('cost_usd', 0):.4f}, {e.get('calls', 0)} calls, "
                f"{e.get('duration_s', 0)} s)")
    if ev == "prompt":
        return ""
    rest = {k: v for k, v in e.items() if k not in ("ts", "wake", "event")}
    return f"{ts} {ev}: {json.dumps(rest)[:200]}"


def _echo(text: str) -> None:
    """Print what the citizen wrote (every field of its wake log) without its escapes."""
    click.echo(clean(text))


def _transcript(path: Path, as_json: bool) -> None:
    for event in wakelog.read(path):
        if as_json:
            _echo(json.dumps(event))
        elif (text := _line(event)):
            _echo(text)


def _row(r: dict[str, Any]) -> str:
    return (f"{r['wake']:>6}  {r['type']:<12} {r['started'][:19]:<19}  {r['status']:<10} "
            f"${r['cost_usd']:<8.4f} {r['calls']:>3} calls {r['duration_s']:>7.1f} s  "
            f"{(r['why'] or '')[:70]}")


@click.command()
@citizen_argument
@click.option("--wake", "number", type=int, default=None, help="Show this wake's transcript.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new wakes as they end.")
@click.option("--limit", type=int, default=30, show_default=True, help="Rows in the table.")
@json_option
def logs(name: str, number: int | None, follow: bool, limit: int, as_json: bool) -> None:
    """A table of citizen NAME's wakes, or the transcript of one.

    \b
    Examples:
      citizen logs opus
      citizen logs opus --wake 12
      citizen logs opus --follow
    """
    home = paths.home(name)
    files = wakelog.wake_logs(home)
    if number is not None:
        match = [p for p in files if p.name.startswith(f"{number:06d}-")]
        if not match:
            raise click.ClickException(f"no wake {number} in {home.wake_logs}")
        _transcript(match[0], as_json)
        return
    shown: set[Path] = set()
    for path in files[-limit:]:
        row = wakelog.summary(path)
        _echo(json.dumps(row) if as_json else _row(row))
        if row["status"] != "running":
            shown.add(path)
    if not files and not follow:
        _echo(f"no wakes yet in {home.wake_logs}")
    while follow:
        time.sleep(0.5)
        for path in wakelog.wake_logs(home):
            if path in shown:
                continue
            row = wakelog.summary(path)
            if row["status"] != "running":
                _echo(json.dumps(row) if as_json else _row(row))
                shown.add(path)
