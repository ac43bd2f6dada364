"""The `citizen` command: one click group, one module per command group.

Nothing imported here may import a model SDK: `citizen --help`, `status` and other
commands that make no model call must stay fast (`import anthropic` alone is ≈2 s).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

from citizen import __version__
from citizen.cli.ask import ask
from citizen.cli.demo import demo
from citizen.cli.doctor import doctor
from citizen.cli.init import init
from citizen.cli.logs import logs
from citizen.cli.memory import memory
from citizen.cli.run import run
from citizen.cli.status import status
from citizen.cli.task import task
from citizen.cli.tool import tool_cmd
from citizen.cli.wake import wake
from citizen.errors import CitizenError


class _Group(click.Group):
    """Turns our own errors into a one-line message and exit code 1, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CitizenError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="citizen")
@click.option("--root", type=click.Path(file_okay=False), envvar="CIV_ROOT",
              help="Civilization root (default $CIV_ROOT, else /home).")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def cli(root: str | None, verbose: int) -> None:
    """Experience: persistent AI citizens on one server.

    \b
    Examples:
      citizen init --root /tmp/civ           create opus, mira and aria (dev mode)
      citizen --root /tmp/civ task add opus "Write notes/hi.md"
      citizen --root /tmp/civ run opus       the daemon (systemd runs this)
      citizen --root /tmp/civ status
      citizen --root /tmp/civ logs opus --wake 1
      citizen doctor                         check config, paths and the model
      citizen demo                           three daemons on the embedded model
    """
    if root:
        os.environ["CIV_ROOT"] = root  # every path derives from this one variable
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    # Commands log to stderr so that stdout stays clean for --json.
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


for _command in (init, status, logs, task, wake, run, tool_cmd, memory, demo, doctor, ask):
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point."""
    cli()
