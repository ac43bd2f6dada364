"""`citizen run`: the resident daemon (what systemd starts), or every citizen's in one
process (`--all`, dev mode)."""

from __future__ import annotations

import logging
import os
import pwd
import sys
from pathlib import Path

import click

from citizen.admin.schedstore import USER
from citizen.cli.options import CitizenName, known_citizens
from citizen.config import server_mode


@click.command()
@click.argument("name", type=CitizenName(), required=False)
@click.option("--all", "everyone", is_flag=True,
              help="Every citizen's daemon in this one process (dev mode: a few KB a "
                   "citizen instead of a process of 28 MB each).")
@click.option("--scheduler", "scheduled", is_flag=True,
              help="With --all in dev mode: rehearse the server's scheduler - nothing "
                   "written in a home by this process, each wake with work `citizen run "
                   "NAME --request FILE`. On a server, --all run by experience-scheduler is "
                   "always the scheduler.")
@click.option("--request", "request", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Run the one wake the scheduler's request FILE asks for, "
                                 "then exit (what citizen-wake@NAME runs).")
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
def run(*, name: str | None, everyone: bool, scheduled: bool, request: Path | None,
        parallel: int | None, interval: float | None, max_wakes: int | None,
        wake_timeout: float, first_wake: float | None) -> None:
    """Run the daemon of citizen NAME in the foreground (systemd runs this), or with --all
    every citizen's daemon in one process.

    \b
    Examples:
      citizen run opus
      citizen run opus --interval 30 --max-wakes 10
      citizen --root /tmp/civ run --all
      citizen --root /tmp/civ run --all --scheduler
    """
    if everyone == (name is not None):
        raise click.UsageError("name one citizen, or give --all (not both)")
    if request is not None and name is None:
        raise click.UsageError("--request runs one citizen's wake: name the citizen")
    server = everyone and server_mode()
    if server and pwd.getpwuid(os.geteuid()).pw_name != USER:
        # Each citizen is its own user here: one process would write homes not its own
        # (and root's files there would lock each citizen's own daemon out). The
        # scheduler's own user writes none: it is the one that may host them all.
        raise click.UsageError(f"--all on a server is the scheduler, run as {USER}: sudo "
                               "systemctl start experience-scheduler (or a daemon each: "
                               "sudo systemctl start citizens.target)")
    # The daemon logs to stdout, one line per event, for journald.
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, force=True,
                        format=(f"%(levelname)s citizen:{name} %(message)s" if name else
                                "%(levelname)s %(threadName)s %(message)s"))
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # job bookkeeping is noise here
    for chatty in ("httpx", "httpx2", "httpcore"):  # a line per broker call: noise in a journal
        logging.getLogger(chatty).setLevel(logging.WARNING)
    if name is not None and request is not None:
        from citizen.daemon.unit import run_request  # noqa: PLC0415 - only what this run needs

        raise SystemExit(run_request(name, request, wake_timeout_s=wake_timeout))
    if name is not None:
        from citizen.daemon.process import Daemon  # noqa: PLC0415 - only what this run needs

        raise SystemExit(Daemon(name, interval_s=interval, max_wakes=max_wakes,
                                wake_timeout_s=wake_timeout, first_wake_s=first_wake).run())
    kw = {"interval_s": interval, "max_wakes": max_wakes, "wake_timeout_s": wake_timeout,
          "first_wake_s": first_wake, "parallel": parallel or os.cpu_count() or 2}
    if server or scheduled:
        from citizen.admin.schedstore import Store  # noqa: PLC0415
        from citizen.broker import mailnews  # noqa: PLC0415
        from citizen.daemon import scheduled as how  # noqa: PLC0415 - only what this run needs
        from citizen.daemon.scheduler import Scheduler  # noqa: PLC0415

        starter = how.systemd_starter if server else how.process_starter
        raise SystemExit(Scheduler(known_citizens(), store=Store(), starter=starter,
                                   news=mailnews.read, **kw).run())
    from citizen.daemon.crowd import Crowd  # noqa: PLC0415 - only what this run needs

    raise SystemExit(Crowd(known_citizens(), **kw).run())  # type: ignore[arg-type]
