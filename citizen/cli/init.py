"""`citizen init`: create a civilization tree (dev mode: owned by the current user)."""

from __future__ import annotations

import os

import click

from citizen import civilization, config, paths


@click.command()
@click.argument("names", nargs=-1)
@click.option("--root", type=click.Path(file_okay=False), default=None,
              help="Civilization root (default $CIV_ROOT, else /home).")
def init(names: tuple[str, ...], root: str | None) -> None:
    """Create the commons and citizen homes (all template citizens unless NAMES are given).

    Dev mode: no root needed; everything is owned by you. Running it again only
    fills in what is missing - nothing is overwritten.

    \b
    Examples:
      citizen init --root /tmp/civ
      citizen init --root /tmp/civ opus mira
    """
    if root:
        os.environ["CIV_ROOT"] = root
    chosen = list(names) or config.templates().citizen_names()
    made = civilization.init(chosen)
    click.echo(f"civilization at {paths.civ_root()}: citizens {', '.join(chosen)}; "
               f"{len(made)} paths created" + ("" if made else " (already complete)"))
