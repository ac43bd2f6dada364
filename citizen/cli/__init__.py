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
from citizen.cli.doctor import doctor
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
      citizen doctor                 check config, paths and the model
      citizen ask "What is DRY?"     one model call, with tokens and cost
      citizen --root /tmp/civ doctor --citizen mira
    """
    if root:
        os.environ["CIV_ROOT"] = root  # every path derives from this one variable
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    # Commands log to stderr so that stdout stays clean for --json.
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


cli.add_command(doctor)
cli.add_command(ask)


def main() -> None:
    """Console-script entry point."""
    cli()
