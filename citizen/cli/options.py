"""Options shared by several commands."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Callable
from typing import Any, TypeVar

import click

from citizen import civilization
from citizen.admin import approvals
from citizen.cli.terminal import NoSuch, clean, command
from citizen.config import PROVIDERS, paths, server_mode, templates

F = TypeVar("F", bound=Callable[..., Any])


def citizen_option(func: F) -> F:
    """`--citizen NAME` (default: the first citizen in the templates): an existing citizen
    or one the templates define (doctor and ask run before `init` too)."""
    return click.option("--citizen", "name", default=None, metavar="NAME",
                        type=CitizenName(templates_too=True),
                        help="Which citizen's config and secrets to use (default: the first "
                        "in templates/citizen_configs.json).")(func)


def provider_option(func: F) -> F:
    """`--provider` overriding the citizen's configured provider."""
    return click.option("--provider", type=click.Choice([p for p in PROVIDERS if p != "replay"]),
                        default=None, help="Override the configured provider.")(func)


def json_option(func: F) -> F:
    """`--json` for scripts."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print machine-readable JSON.")(func)


def known_citizens() -> list[str]:
    """Every citizen a command may name: the homes with a config, and on a server every
    member of the `citizens` group (a citizen can delete its own config.json)."""
    names = set(civilization.citizens())
    if server_mode():
        names.update(civilization.citizen_users())
    return sorted(names)


class CitizenName(click.ParamType):  # type: ignore[type-arg]
    """A citizen that exists. Anything else fails before the command touches a file, with
    the valid names (exit 2: the person asked for something that is not there)."""

    name = "citizen"

    def __init__(self, templates_too: bool = False) -> None:
        self.templates_too = templates_too

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        known = known_citizens()
        if self.templates_too:
            known = sorted({*known, *templates().citizen_names()})
        if value in known:
            return str(value)
        raise NoSuch(no_citizen(str(value), known))


def no_citizen(name: str, known: list[str] | None = None) -> str:
    """The one line that says citizen `name` does not exist, and what does."""
    known = known_citizens() if known is None else known
    where = paths.civ_root()
    if not known:
        return (f"no citizen {name!r}: there are no citizens under {where} - create them "
                f"with `{command('init')}` (or give the right --root)")
    return (f"no citizen {name!r} under {where}; the citizens are: {', '.join(known)}")


def citizen_argument(func: F) -> F:
    """The NAME argument of a command about one existing citizen."""
    return click.argument("name", type=CitizenName())(func)


def resolve_name(name: str | None) -> str:
    """The citizen a command acts for: the one named, else the first in the templates."""
    return name or templates().citizen_names()[0]


def operator() -> str:
    """Who is acting from the shell: the user behind sudo, else the user running it."""
    return os.environ.get("SUDO_USER") or pwd.getpwuid(os.geteuid()).pw_name


def ring_as_operator(name: str, wake_type: str, reason: str) -> None:
    """Ring citizen NAME's doorbell from the shell."""
    if not approvals.ring(name, wake_type, reason):
        raise click.ClickException(f"could not ring {name}'s doorbell (see the log above); "
                                   "its next scheduled wake takes the work")


def echo_rows(rows: list[dict[str, Any]], as_json: bool, line: Callable[[dict[str, Any]], str],
              empty: str) -> None:
    """A listing: the rows as JSON with --json, else one line each (or `empty`)."""
    if as_json:
        click.echo(json.dumps(rows))
        return
    for r in rows:
        click.echo(clean(line(r)))  # a row carries what citizens wrote (goals, topics)
    if not rows:
        click.echo(empty)
