"""`citizen wake`: one wake now, in the foreground - the same path the daemon's wakes take."""

from __future__ import annotations

import ctypes
import json
import os
import signal

import click

from citizen.cli.options import citizen_argument, json_option
from citizen.cli.terminal import NoSuch, clean, command
from citizen.daemon.notify import DAEMON_PID_ENV
from citizen.wake import types as wakes
from citizen.wake.flow import run_wake

PR_SET_PDEATHSIG = 1


def _die_with_daemon() -> None:
    """A wake started by a daemon dies with it, so a restarted daemon never finds an
    orphan still working on the task it is about to requeue."""
    pid = os.environ.get(DAEMON_PID_ENV)
    if not pid:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # In the daemon's process group (daemon/process.py): SIGTERM - the daemon's "stop
    # now", or a stop of the whole group - interrupts the wake as Ctrl-C would (its
    # sandboxed command killed, its contexts saved); a terminal's Ctrl-C is the daemon's
    # to decide, which lets a running wake finish.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # A handler that does nothing, not SIG_IGN: an ignored signal stays ignored across
    # exec, and the commands the wake runs must keep their own Ctrl-C.
    signal.signal(signal.SIGINT, lambda *_: None)
    if os.getppid() != int(pid):  # the daemon died before prctl took effect
        raise SystemExit(f"the daemon (pid {pid}) that started this wake is gone")


@click.command()
@citizen_argument
@click.option("--type", "wake_type", default=None, metavar="TYPE",
              help="Wake type (TASK, REFLECT, …); default: the next scheduled slot.")
@click.option("--number", type=int, default=None, hidden=True)
@click.option("--slot", type=int, default=None, hidden=True)
@click.option("--reason", default="", hidden=True)
@json_option
def wake(*, name: str, wake_type: str | None, number: int | None, slot: int | None, reason: str,
         as_json: bool) -> None:
    """Run one wake of citizen NAME now and print how it ended.

    Exits 1 when the wake did not do its work: it failed, its task failed, or the model
    was asked and never answered; 0 otherwise (idle included). --json says the same:
    `status`, `task_state`, `model_answered` and `failed`.

    \b
    Examples:
      citizen wake opus               the next scheduled slot
      citizen wake opus --type TASK   a task wake now
    """
    _die_with_daemon()
    if wake_type is not None:
        wake_type = wake_type.upper()
        # The operator's typo fails before a number is taken or a log written; the
        # daemon's requests (--number given) keep the flow's logged skip instead.
        if number is None and wake_type not in wakes.registered():
            raise NoSuch(f"no wake type {wake_type!r}; the wake types are: "
                         f"{', '.join(wakes.registered())}")
    result = run_wake(name, wake_type=wake_type, number=number, slot=slot, reason=reason)
    if as_json:
        click.echo(json.dumps({**result.__dict__, "log_path": str(result.log_path),
                               "failed": result.failed}))
    elif not os.environ.get(DAEMON_PID_ENV):  # under a daemon, the daemon logs the outcome
        task = f"; task {result.task} {result.task_state}" if result.task else ""
        silent = "; the model never answered" if result.model_answered is False else ""
        # The reason may quote the model or the task: cleaned of terminal sequences.
        click.echo(clean(f"wake {result.number} {result.wake_type}: {result.status}"
                         f"{' - ' + result.reason if result.reason else ''} "
                         f"(${result.cost_usd:.4f}, {result.calls} model calls{task}{silent})")
                   + f"\nlog: {command(f'logs {name} --wake {result.number}')}")
    if result.failed:  # the daemon reads the wake's log, not this code (_record_end)
        raise SystemExit(1)
