"""`citizen task`: give a citizen work, and see its tasks."""

from __future__ import annotations

import json
import os

import click

from citizen.cli.options import citizen_argument, json_option, ring_as_operator
from citizen.cli.terminal import clean
from citizen.config import paths
from citizen.home.tasks import STATES, TASK_KINDS, TaskQueue


@click.group()
def task() -> None:
    """Add and list a citizen's tasks."""


@task.command("add")
@citizen_argument
@click.argument("text")
@click.option("--kind", type=click.Choice(TASK_KINDS), default="TASK", show_default=True)
def add(name: str, text: str, kind: str) -> None:
    """Queue a task for citizen NAME and ring its doorbell.

    \b
    Example:
      citizen task add opus "Write notes/hello.md saying hello to mira"
    """
    home = paths.home(name)
    if not home.dir.is_dir():
        raise click.ClickException(f"citizen {name} has no home at {home.dir} - run "
                                   "`citizen init` first")
    # Root (an operator with sudo) writes on the citizen's behalf: the citizen owns the files.
    owner = (home.dir.stat().st_uid, home.dir.stat().st_gid) if os.geteuid() == 0 else None
    queued = TaskQueue(home.tasks).add(text, kind=kind, source="cli", owner=owner)
    ring_as_operator(name, kind, f"task {queued.id}")
    click.echo(f"queued {queued.id} for {name}; its daemon wakes for it within seconds")


@task.command("list")
@citizen_argument
@json_option
def list_tasks(name: str, as_json: bool) -> None:
    """List citizen NAME's tasks by state."""
    tasks = TaskQueue(paths.home(name).tasks)
    rows = [(state, tid, tasks.load(state, tid)) for state in STATES for tid in tasks.ids(state)]
    if as_json:
        click.echo(json.dumps([{"state": s, **t.to_dict()} for s, _, t in rows]))
        return
    for state, tid, t in rows:  # names and contents are the citizen's: no escapes through
        click.echo(clean(f"{state:<7} {tid}  {t.kind:<8} {t.text[:60]!r}  {t.result[:60]}"))
    if not rows:
        click.echo("no tasks")
