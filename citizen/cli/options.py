"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from citizen.config import PROVIDERS

F = TypeVar("F", bound=Callable[..., Any])


def citizen_option(func: F) -> F:
    """`--citizen NAME` (default: the first citizen in the templates)."""
    return click.option("--citizen", "name", default=None, metavar="NAME",
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


def resolve_name(name: str | None) -> str:
    """The citizen a command acts for: the one named, else the first in the templates."""
    from citizen.config import templates  # noqa: PLC0415 - keep `--help` free of file reads

    return name or templates().citizen_names()[0]
