"""`citizen run`: the resident daemon (what systemd starts), or every citizen's in one
process (`--all`, dev mode)."""

from __future__ import annotations

import logging
import os
import sys

import click

from citizen.cli.options import CitizenName, known_citizens
from citizen.config import server_mode


@click.command()
@click.argument("name", type=CitizenName(), required=False)
@click.option("--all", "everyone", is_flag=True,
              help="Every citizen's daemon in this one process (dev mode: a few KB a "
                   "citizen instead of a process of 28 MB each).")
@click.option("--parallel", type=click.IntRange(1, 64), default=None,
              help="With --all: wakes running at once (default: the CPUs).")
@click.option("--interval", type=float, default=None,
              help="Seconds between scheduled wakes (default: the citizen's config).")
@click.option("--max-wakes", type=int, default=None, help="Stop after this many wakes.")
@click.option("--wake-timeout", type=float, default=1200.0, show_default=True,
              help="Seconds before a wake is killed.")
@click.option("--first-wake", type=float, default=None,
              help="Seconds from start to the first scheduled wake (default: 1 s plus a "
                   "spread of up to a minute fixed by NAME, so daemons started together "
                   "wake apart).")
def run(*, name: str | None, everyone: bool, parallel: int | None, interval: float | None,
        max_wakes: int | None, wake_timeout: float, first_wake: float | None) -> None:
    """Run the daemon of citizen NAME in the foreground (systemd runs this), or with --all
    every citizen's daemon in one process.

    \b
    Examples:
      citizen run opus
      citizen run opus --interval 30 --max-wakes 10
      citizen --root /tmp/civ run --all
    """
    if everyone == (name is not None):
        raise click.UsageError("name one citizen, or give --all (not both)")
    if everyone and server_mode():
        # Each citizen is its own user here: one process would write homes not its own
        # (and root's files there would lock each citizen's own daemon out).
        raise click.UsageError("--all is for dev mode; on a server each citizen's unit runs "
                               "its daemon: sudo systemctl start citizens.target")
    # The daemon logs to stdout, one line per event, for journald.
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, force=True,
                        format=(f"%(levelname)s citizen:{name} %(message)s" if name else
                                "%(levelname)s %(threadName)s %(message)s"))
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # job bookkeeping is noise here
    if name is not None:
        from citizen.daemon.process import Daemon  # noqa: PLC0415 - only what this run needs

        raise SystemExit(Daemon(name, interval_s=interval, max_wakes=max_wakes,
                                wake_timeout_s=wake_timeout, first_wake_s=first_wake).run())
    from citizen.daemon.crowd import Crowd  # noqa: PLC0415 - only what this run needs

    raise SystemExit(Crowd(known_citizens(), interval_s=interval, max_wakes=max_wakes,
                           wake_timeout_s=wake_timeout, first_wake_s=first_wake,
                           parallel=parallel or os.cpu_count() or 2).run())
