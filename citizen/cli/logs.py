"""`citizen logs`: a table of a citizen's wakes, the transcript of one wake, or a live tail.

Every event of a wake is one line of its log (`citizen.home.wakelog`, the one reader);
`_line` renders each kind in one readable line (a few for a model's reply), and the same
renderings serve the transcript (`--wake N`) and the tail (`--follow`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from citizen.cli.options import citizen_argument, json_option
from citizen.cli.terminal import NoSuch, age, clean, command, table, wide_option
from citizen.config import paths
from citizen.home import wakelog

POLL_S = 0.25  # --follow: a stat of the log directory and of each open log, 4 times a second
RELIST_POLLS = 12
FOLLOW_ROWS = 5  # --follow starts with the last few wakes' rows, as `journalctl -f` does
_MORE = "\n           "  # a continuation line under an event


def _model(e: dict[str, Any], ts: str) -> str:
    """A model call: the model that answered (and the route's, if another), then what it
    said or asked for - or what the deliverables and the verification came to."""
    if "error" in e:
        return f"{ts}   model [{e.get('purpose')}] output rejected: {e['error']}"
    reply = e.get("reply") or {}
    routed = f" (route: {e['route_model']})" if e.get("route_model") else ""
    head = (f"{ts}   model [{e.get('purpose')}] {e.get('model')}{routed}: {e.get('tokens_in')} "
            f"in, {e.get('tokens_out')} out, ${e.get('cost_usd', 0):.4f}, {e.get('latency_s')} s")
    data = reply.get("data")
    if e.get("purpose") == "task_deliverables" and isinstance(data, dict):
        return f"{head}{_MORE}read from the task: {_deliverables(data)}"
    if e.get("purpose") == "verify_task" and isinstance(data, dict):
        return f"{head}{_MORE}verification: {data.get('verdict')} - {data.get('reason', '')}"
    calls = ", ".join(f"{c.get('name')}({json.dumps(c.get('input'))[:80]})"
                      for c in reply.get("tool_calls") or [])
    said = (reply.get("text") or "").strip().replace("\n", " ")[:160]
    return (head + (f"{_MORE}says: {said}" if said else "")
            + (f"{_MORE}calls: {calls}" if calls else ""))


def _deliverables(data: dict[str, Any]) -> str:
    files = ", ".join(map(str, data.get("files") or [])) or "none"
    cmds = ", ".join(str(c.get("run", c) if isinstance(c, dict) else c)
                     for c in data.get("commands") or []) or "none"
    return (f"files {files}; commands {cmds}; an answer "
            f"{'asked' if data.get('answer') else 'not asked'}")


def _task(e: dict[str, Any], ts: str) -> str:
    """A task's transition; when claimed, the deliverables fixed for it (what "done" is
    checked against); when done, the summary with its evidence and verifier's verdict."""
    head = f"task {e.get('id')} {e.get('transition')}"
    summary = str(e.get("summary") or "").strip().removeprefix(head).removeprefix(":").strip()
    wanted = e.get("deliverables")
    return (f"{ts} {head}" + (f": {summary}".replace("\n", _MORE) if summary else "")
            + (f"{_MORE}deliverables recorded: {_deliverables(wanted)}"
               if isinstance(wanted, dict) else ""))


def _line(e: dict[str, Any]) -> str:  # noqa: PLR0911 - one readable line per event kind
    ev, ts = e.get("event", "?"), str(e.get("ts", ""))[11:19]
    if ev == "wake_start":
        return (f"{ts} wake {e.get('wake')} {e.get('type')} started ({e.get('reason')}), "
                f"pid {e.get('pid')}")
    if ev == "gate":
        return f"{ts} gate: {e.get('verdict')} - {e.get('reason')}"
    if ev == "llm_call":
        return _model(e, ts)
    if ev == "route":
        return (f"{ts} route: tier {e.get('tier')} ({e.get('method')}), its seat's model "
                f"{e.get('route_model', e.get('model'))}")
    if ev == "tool_call":
        flag = " (cached)" if e.get("cached") else (" ERROR" if e.get("error") else "")
        result = str(e.get("result", "")).replace("\n", " ")[:140]
        return (f"{ts}   tool {e.get('tool')}{flag} {json.dumps(e.get('args'))[:100]}"
                f"{_MORE}-> {result}")
    if ev == "task":
        return _task(e, ts)
    if ev == "error":
        return f"{ts} ERROR {e.get('error')}\n{e.get('traceback', '')}"
    if ev == "wake_end":
        why = str(e.get("reason") or "").replace("\n", _MORE)
        return (f"{ts} wake ended: {e.get('status')}{' - ' + why if why else ''} "
                f"(${e.get('cost_usd', 0):.4f}, {e.get('calls', 0)} calls, "
                f"{e.get('duration_s', 0)} s)")
    if ev == "prompt":
        return ""
    rest = {k: v for k, v in e.items() if k not in ("ts", "wake", "event")}
    return f"{ts} {ev}: {json.dumps(rest)[:200]}"


def _echo(text: str) -> None:
    """Print what the citizen wrote (every field of its wake log) without its escapes."""
    click.echo(clean(text))


def _event(event: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _echo(json.dumps(event))
    elif text := _line(event):
        _echo(text)


def _rows(rows: list[dict[str, Any]], wide: bool) -> None:
    """The wakes under a header: when each started as an age (ISO in --json)."""
    table(["WAKE", "TYPE", "STARTED", "STATUS", "COST", "CALLS", "TIME", "WHY"],
          [[r["wake"], r["type"], age(r["started"] or None), r["status"],
            f"${r['cost_usd']:.4f}", r["calls"], f"{r['duration_s']:.1f} s", r["why"] or ""]
           for r in rows], wide=wide)


@click.command()
@citizen_argument
@click.option("--wake", "number", type=int, default=None, help="Show this wake's transcript.")
@click.option("--follow", "-f", is_flag=True,
              help="Print the wake in progress event by event, and every wake after it, "
              "until Ctrl-C.")
@click.option("--limit", type=int, default=30, show_default=True, help="Rows in the table.")
@wide_option
@json_option
def logs(*, name: str, number: int | None, follow: bool, limit: int, wide: bool,
         as_json: bool) -> None:
    """A table of citizen NAME's wakes, the transcript of one, or a live tail.

    `citizen ask` and `citizen doctor` calls are not wakes: they are in the money of the
    day (`citizen cost`) and their transcript is at `--wake N`, but not in the table.

    \b
    Examples:
      citizen logs opus
      citizen logs opus --wake 12
      citizen logs opus --follow
      citizen logs opus --json | jq .status
    """
    home = paths.home(name)
    if number is not None:
        match = [p for p in wakelog.wake_logs(home, calls=True)
                 if p.name.startswith(f"{number:06d}-")]
        if not match:
            raise NoSuch(f"no wake {number} of {name} in {home.wake_logs} - list them with "
                         f"`{command(f'logs {name}')}`")
        for event in wakelog.read(match[0]):
            _event(event, as_json)
        return
    files = wakelog.wake_logs(home)
    if follow:
        try:
            _follow(home, files[-FOLLOW_ROWS:], as_json, wide)
        except KeyboardInterrupt:  # Ctrl-C is how a tail ends: exit 0, no traceback
            return
        return
    rows = [wakelog.summary(p) for p in files[-limit:]]
    if as_json:
        for row in rows:
            _echo(json.dumps(row))
    elif rows:
        _rows(rows, wide)
    else:
        _echo(f"no wakes yet in {home.wake_logs}")


def _follow(home: paths.Home, recent: list[Path], as_json: bool, wide: bool) -> None:
    """The last wakes' rows, then every event of the wake in progress and of each wake
    after it, as it is written (journalctl -f). Runs until interrupted."""
    rows = [wakelog.summary(p) for p in recent]
    ended = [r for r in rows if r["status"] != "running"]
    if as_json:
        for row in ended:
            _echo(json.dumps(row))
    elif ended:
        _rows(ended, wide)
    seen = {Path(r["path"]) for r in rows}
    # The wakes being written and their read offsets: a running one from its first event.
    open_logs = {Path(r["path"]): 0 for r in rows if r["status"] == "running"}
    listed, polls = -1, 0
    while True:
        mtime = home.wake_logs.stat().st_mtime_ns if home.wake_logs.is_dir() else 0
        polls += 1
        # A new log changes the directory's mtime; every few seconds it is listed anyway,
        # for a log created within the same clock tick as the previous listing.
        if mtime != listed or polls % RELIST_POLLS == 0:
            listed = mtime
            for path in wakelog.wake_logs(home):
                if path not in seen and not path.name.endswith(".gz"):
                    seen.add(path)
                    open_logs[path] = 0
        for path in sorted(open_logs):
            events, open_logs[path] = wakelog.read_new(path, open_logs[path])
            for event in events:
                _event(event, as_json)
            if any(e.get("event") == "wake_end" for e in events) or not path.exists():
                del open_logs[path]
        time.sleep(POLL_S)
