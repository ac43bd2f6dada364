"""Progress of the long steps of a command (issue 31), on stderr.

On a terminal: one live line per step, redrawn every $PROGRESS_INTERVAL seconds
(default 1) - a bar with a time estimate when the step reports its size

    snapshot of 5 paths ━━━━━━━━━━╸━━━━━━━━━  52% 131/253 MB, about 4 s left

and a heartbeat when it does not (`restoring /home/opus from latest ... 40 s`); each step
leaves `done: X (N s)` (or `failed: X (after N s)`) when it ends. Anywhere else - a log,
a pipe, cron's mail, `TERM=dumb` - only `started: X` and `done: X (N s)` lines: no \\r,
no escape sequence, no heartbeat. Everything goes to stderr, so stdout stays the
command's output (`--json`). The wording is scripts/lib/progress.sh's.

Why rich.progress rather than click.progressbar: click's bar needs a known length and
redraws only when the code advances it, so a step of unknown size (restic 0.14's restore
says nothing while it works) would sit still; rich redraws from a thread of its own (the
heartbeat needs none of ours), keeps the elapsed time and prints the done lines above the
live one. It is imported inside `steps()`, on a terminal only: `citizen status` and
`--help` never load it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from citizen.cli.terminal import clean

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.progress import Progress, Task, TaskID

# A step's figures: bytes done, bytes in all, seconds left (None: unknown).
Update = Callable[[float, float, "float | None"], None]
INTERVAL_ENV = "PROGRESS_INTERVAL"  # seconds between redraws (the tests make it small)


def interval() -> float:
    """Seconds between two redraws of the live line: $PROGRESS_INTERVAL, else 1."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, "") or 1.0)
    except ValueError:
        value = 1.0
    return min(max(value, 0.05), 60.0)


def took(seconds: float) -> str:
    """40 -> "40 s", 200 -> "3 min 20 s"."""
    whole = int(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


def on_terminal() -> bool:
    """Is stderr a terminal that can redraw a line (not a log, not TERM=dumb)?"""
    return sys.stderr.isatty() and os.environ.get("TERM", "") not in ("dumb", "unknown")


@contextlib.contextmanager
def steps() -> Iterator[Lines | Live]:
    """What shows the steps of one command (citizen.admin.backup.Steps): live on a
    terminal, start and end lines elsewhere."""
    if not on_terminal():
        yield Lines()
        return
    from rich.console import Console  # noqa: PLC0415 - lazy: status and --help never load rich
    from rich.progress import Progress  # noqa: PLC0415 - lazy, as above

    every = interval()
    # transient: the live lines go when the command ends; the done lines stay.
    # redirect_stdout off: stdout is the command's output, never drawn into the display.
    with Progress(*_columns(), console=Console(stderr=True),
                  refresh_per_second=1 / every, transient=True,
                  redirect_stdout=False) as bar:
        yield Live(bar, every)


class Lines:
    """Not on a terminal: a line when a step starts and one when it ends."""

    every_s = 10.0  # figures are not shown: restic may send them rarely

    @contextlib.contextmanager
    def step(self, label: str) -> Iterator[Update]:
        label = clean(label)
        click.echo(f"started: {label}", err=True)
        start = time.monotonic()
        try:
            yield _ignore
        except BaseException:
            click.echo(f"failed: {label} (after {took(time.monotonic() - start)})", err=True)
            raise
        click.echo(f"done: {label} ({took(time.monotonic() - start)})", err=True)


class Live:
    """On a terminal: a live line per step (rich), a done line when it ends."""

    def __init__(self, bar: Progress, every_s: float) -> None:
        self.bar, self.every_s = bar, every_s

    @contextlib.contextmanager
    def step(self, label: str) -> Iterator[Update]:
        label = clean(label)
        task = self.bar.add_task(label, total=None, left=None)
        self.bar.refresh()  # shown at once, not at the next tick
        start = time.monotonic()

        def update(done: float, total: float, left_s: float | None) -> None:
            self.bar.update(task, completed=done, total=total or None, left=left_s)
            self.bar.refresh()

        try:
            yield update
        except BaseException:
            self._leave(task, f"failed: {label} (after {took(time.monotonic() - start)})")
            raise
        self._leave(task, f"done: {label} ({took(time.monotonic() - start)})")

    def _leave(self, task: TaskID, line: str) -> None:
        self.bar.remove_task(task)
        self.bar.refresh()  # the live lines without it, before the line is printed above
        # soft_wrap: a long path is wrapped by the terminal, not cut into lines by rich
        self.bar.console.print(line, markup=False, highlight=False, soft_wrap=True)


def _ignore(done: float, total: float, left_s: float | None) -> None:
    del done, total, left_s


def _columns() -> list[Any]:
    """The live line's columns: label, bar (sized steps only), figures or heartbeat."""
    from rich.progress import BarColumn, ProgressColumn  # noqa: PLC0415 - lazy, as above
    from rich.text import Text  # noqa: PLC0415 - lazy, as above

    bar = BarColumn(bar_width=20)

    class Column(ProgressColumn):
        def __init__(self, render: Callable[[Task], RenderableType]) -> None:
            super().__init__()
            self.draw = render

        def render(self, task: Task) -> RenderableType:
            return self.draw(task)

    def figures(task: Task) -> RenderableType:
        elapsed = task.elapsed or 0.0
        if not task.total:
            return Text(f"... {took(elapsed)}", no_wrap=True)
        done, total = task.completed, task.total
        left = task.fields.get("left")
        if left is None and 0 < done < total:  # the rate so far, as progress.sh estimates
            left = elapsed * (total - done) / done
        return Text(f"{100 * min(done / total, 1.0):3.0f}% "
                    f"{done / 2**20:.0f}/{total / 2**20:.0f} MB"
                    + (f", about {took(left + 0.999)} left" if left else ""), no_wrap=True)

    # The label plain (a "[" in a path is no markup), cut with "…" on a narrow terminal:
    # one line per step, whatever its width.
    return [Column(lambda task: Text(task.description, no_wrap=True, overflow="ellipsis")),
            Column(lambda task: bar.render(task) if task.total else Text("")),
            Column(figures)]
