"""What the CLI prints to a person: clean text, ages, tables, pasteable hints.

Wake logs, task files, heartbeats and their names are the citizen's: a string there may
carry escape sequences that, printed raw, retitle the window, rewrite what is on the
screen, or answer back into the operator's shell (issue 28). Every command that prints
such text puts it through `clean` first; `table` does it for every cell.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from shared import clock

F = TypeVar("F", bound=Callable[..., Any])
WIDTH = 120  # a table's width unless --wide: fits a split terminal and a pasted issue

# Whole sequences first, so their parameters do not survive as garbage: CSI (ESC [ or
# the one-byte 0x9b), OSC / DCS / SOS / PM / APC strings up to their terminator (BEL,
# ESC \ or 0x9c) or the end, and any other ESC with the byte after it.
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[\s\S]?")
# Then every control left: C0 but newline and tab, DEL, and C1 (0x80-0x9f).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """`text` without terminal control sequences or control characters (\\n, \\t kept)."""
    return _CONTROL.sub("", _SEQUENCE.sub("", text))


class NoSuch(click.ClickException):
    """The person asked for something that does not exist: exit 2 (click's convention for
    a usage error), so a script can tell it from a command that ran and failed (1)."""

    exit_code = 2


def age(when: str | datetime | None, now: datetime | None = None) -> str:
    """`when` as a person reads it ("3 min ago", `shared.clock.age`), cleaned: an unparsable
    value is shown as its text, and that text is the citizen's."""
    return clean(clock.age(when, now))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], wide: bool = False,
          empty: str = "") -> None:
    """Print `rows` under `headers`, at most WIDTH columns unless `wide` (the last column
    is cut to fit, with "…"); every cell is cleaned. `empty` is printed when there are
    no rows. Plain text, no colour: it pipes into grep, less and a pasted issue alike."""
    if not rows:
        if empty:
            click.echo(empty)
        return
    cells = [[clean(str(c)).replace("\n", " ") for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    if not wide:  # fixed columns keep their width; the last one gets what is left
        fixed = sum(widths[:-1]) + 2 * (len(widths) - 1)
        widths[-1] = max(len(headers[-1]), min(widths[-1], WIDTH - fixed))
    for row in [list(headers), *cells]:
        *first, last = row
        if len(last) > widths[-1]:
            last = last[:widths[-1] - 1] + "…"
        click.echo("  ".join([*(c.ljust(w) for c, w in zip(first, widths, strict=False)),
                              last]).rstrip())


def wide_option(func: F) -> F:
    """`--wide`: tables as wide as their content."""
    return click.option("--wide", is_flag=True,
                        help=f"Do not cut tables to {WIDTH} columns.")(func)


def command(args: str) -> str:
    """A `citizen ...` command line to print as a hint, runnable as printed: with the full
    path of `citizen` when PATH does not lead to this one, and `--root` when this run was
    given a root (by --root or $CIV_ROOT)."""
    exe = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    found = shutil.which("citizen")
    prog = "citizen"
    if exe is not None and exe.name == "citizen" and (
            found is None or Path(found).resolve() != exe):
        prog = shlex.quote(str(exe))
    root = os.environ.get("CIV_ROOT")
    return f"{prog}{f' --root {shlex.quote(root)}' if root else ''} {args}"


def echo(text: str, err: bool = False) -> None:
    """`click.echo` of a line that may carry what a citizen, a model or a mail wrote
    (a proposal's goal, a debate's topic, a stream's text, a model's reply): cleaned."""
    click.echo(clean(text), err=err)
