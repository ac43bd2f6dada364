"""`citizen disk check`: each citizen's home against its disk budget (citizen.admin.disk)."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from citizen.admin import disk as diskmod
from citizen.cli.options import json_option
from citizen.cli.terminal import age, command, table, wide_option
from citizen.errors import CitizenError


@click.group()
def disk() -> None:
    """Each citizen's disk budget (budget.max_home_mb in the operator's rules).

    \b
    Examples:
      citizen disk check                     measure every home and say where each stands
      citizen disk check opus --json
      citizen disk check --enforce           what experience-disk.timer runs, as root
    """


@disk.command("check")
@click.argument("names", nargs=-1)
@click.option("--enforce", is_flag=True,
              help="On a server, as root: stop the unit of each citizen past its budget.")
@click.option("--timeout", "timeout_s", type=float, default=300.0, show_default=True,
              help="Seconds to measure one home; longer counts as over its budget.")
@wide_option
@json_option
def check(names: tuple[str, ...], enforce: bool, timeout_s: float, wide: bool,
          as_json: bool) -> None:
    """Measure each citizen's home (links not followed) against its budget, record the
    verdict where `citizen status` shows it, and with --enforce stop those past it."""
    try:
        verdicts = diskmod.check(list(names) or None, enforce=enforce, timeout_s=timeout_s)
    except PermissionError as exc:
        raise CitizenError(f"{exc.filename}: the disk check records as root - run it as "
                           f"root: `sudo {command('disk check')}`") from exc
    if as_json:
        click.echo(json.dumps([asdict(v) for v in verdicts], indent=2))
        return
    # A note may quote du on the citizen's file names: table() shows it as text only.
    table(["CITIZEN", "USED", "BUDGET", "STATE", "UNIT STOPPED", "NOTE"],
          [[v.citizen, "unmeasured" if v.used_mb is None else f"{v.used_mb:.1f} MB",
            f"{v.budget_mb} MB", v.state.upper(), age(v.stopped_at) if v.stopped_at else "-",
            v.note or "-"] for v in verdicts],
          wide=wide, empty=f"no citizens to check - create them with `{command('init')}`")
