"""`citizen run`: the resident daemon (what systemd starts)."""

from __future__ import annotations

import logging
import sys

import click

from citizen.cli.options import citizen_argument
from citizen.daemon.process import Daemon


@click.command()
@citizen_argument
@click.option("--interval", type=float, default=None,
              help="Seconds between scheduled wakes (default: the citizen's config).")
@click.option("--max-wakes", type=int, default=None, help="Stop after this many wakes.")
@click.option("--wake-timeout", type=float, default=1200.0, show_default=True,
              help="Seconds before a wake is killed.")
@click.option("--first-wake", type=float, default=None,
              help="Seconds from start to the first scheduled wake (default: 1 s plus a "
                   "spread of up to a minute fixed by NAME, so daemons started together "
                   "wake apart).")
def run(*, name: str, interval: float | None, max_wakes: int | None, wake_timeout: float,
        first_wake: float | None) -> None:
    """Run the daemon of citizen NAME in the foreground (systemd runs this).

    \b
    Examples:
      citizen run opus
      citizen run opus --interval 30 --max-wakes 10
    """
    # The daemon logs to stdout, one line per event, for journald.
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, force=True,
                        format=f"%(levelname)s citizen:{name} %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # job bookkeeping is noise here
    raise SystemExit(Daemon(name, interval_s=interval, max_wakes=max_wakes,
                            wake_timeout_s=wake_timeout, first_wake_s=first_wake).run())
