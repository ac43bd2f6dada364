"""`citizen logs`: a table of a citizen's wakes, the transcript of one wake, or a live tail.

Every event of a wake is one line of its log (`citizen.home.wakelog`, the one reader);
`citizen.home.transcript.line` renders each kind in one readable line (a few for a model's
reply), and the same renderings serve the transcript (`--wake N`), the tail (`--follow`)
and the web dashboard's wake page.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from citizen.admin.schedstore import Store
from citizen.cli.options import citizen_argument, json_option
from citizen.cli.terminal import NoSuch, age, command, echo, table, wide_option
from citizen.config import paths
from citizen.home import transcript, wakelog

POLL_S = 0.25  # --follow: a stat of the log directory and of each open log, 4 times a second
RELIST_POLLS = 12
FOLLOW_ROWS = 5  # --follow starts with the last few wakes' rows, as `journalctl -f` does


def _event(event: dict[str, Any], as_json: bool) -> None:
    if as_json:
        echo(json.dumps(event))
    elif text := transcript.line(event):
        echo(text)


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
            echo(json.dumps(row))
    elif rows:
        _rows(rows, wide)
    else:
        echo(f"no wakes yet in {home.wake_logs}")
    if not as_json:
        _scheduled(name)


def _scheduled(name: str) -> None:
    """Under the server's scheduler, the idle wakes it ran (not in the home, not above)."""
    store = Store()
    last = store.last_idle(name)
    if last is None:
        return
    count = sum(1 for _ in store.idle_log(name).open("rb"))  # door: the scheduler's store
    echo(f"and {count} idle wakes in the scheduler, the last {last.get('type')} "
         f"{last.get('status')} {age(str(last.get('ts')))}: {store.idle_log(name)}")


def _follow(home: paths.Home, recent: list[Path], as_json: bool, wide: bool) -> None:
    """The last wakes' rows, then every event of the wake in progress and of each wake
    after it, as it is written (journalctl -f). Runs until interrupted."""
    rows = [wakelog.summary(p) for p in recent]
    ended = [r for r in rows if r["status"] != "running"]
    if as_json:
        for row in ended:
            echo(json.dumps(row))
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
