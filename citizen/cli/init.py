"""`citizen init`: create a civilization tree (dev mode: owned by the current user)."""

from __future__ import annotations

import os

import click

from citizen import config
from citizen.admin import founding
from citizen.cli.terminal import command
from citizen.config import paths


@click.command()
@click.argument("names", nargs=-1)
@click.option("--root", type=click.Path(file_okay=False), default=None,
              help="Civilization root (default $CIV_ROOT, else /home).")
@click.option("--focus", default=None, help="A new citizen's focus (one NAME, not in the "
              "templates).")
@click.option("--email", default=None, help="A new citizen's address (with --focus).")
def init(names: tuple[str, ...], root: str | None, focus: str | None,
         email: str | None) -> None:
    """Create the commons, citizen homes (all template citizens unless NAMES are given),
    the baseline repository of this checkout and each citizen's ~/code as its clone.

    Dev mode: no root needed; everything is owned by you. Running it again only
    fills in what is missing - nothing is overwritten.

    \b
    Examples:
      citizen init --root /tmp/civ
      citizen init --root /tmp/civ opus mira
      citizen init --root /tmp/civ c01 --focus "Testing" --email c01@example.org
    """
    if root:
        os.environ["CIV_ROOT"] = root
    known = config.templates().citizen_names()
    chosen = list(names) or known
    new = [n for n in chosen if n not in known]
    if (focus or email) and len(chosen) != 1:
        raise click.UsageError("--focus and --email describe one new citizen: give one NAME")
    if new and not (focus and email) and not (paths.home(new[0]).config.exists()):
        raise click.UsageError(
            f"{new[0]} is not in the templates ({', '.join(known)}): give it --focus and "
            f"--email, e.g. "
            f"{command(f'init {new[0]} --focus Testing --email {new[0]}@example.org')}")
    made = founding.init_shared()
    for name in chosen:
        made += founding.init_citizen(
            name, {"focus": focus, "email": email} if focus and email else None)
    made += founding.init_code(chosen)
    click.echo(f"civilization at {paths.civ_root()}: citizens {', '.join(chosen)}; "
               f"{len(made)} paths created" + ("" if made else " (already complete)"))
