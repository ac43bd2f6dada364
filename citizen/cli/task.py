"""`citizen task`: give a citizen work, see its tasks, cancel and retry them.

Task files live in the citizen's home and the citizen may edit them: everything read from
one is data - cleaned before it is printed (`terminal.table`, `terminal.clean`), and a file
that does not parse is reported by its path, never a traceback.
"""

from __future__ import annotations

import json
import os
import shlex

import click

from citizen.admin.status import daemon
from citizen.cli.options import citizen_argument, json_option, operator, ring_as_operator
from citizen.cli.task_show import show, task_or_exit
from citizen.cli.terminal import age, clean, command, table, wide_option
from citizen.config import paths, server_mode
from citizen.home import taskops, wakelog
from citizen.home.tasks import STATES, TASK_KINDS, TaskError, TaskQueue
from shared.atomic import CorruptFile
from shared.monitor import alive

LISTED = (*STATES, "held", "corrupt")


@click.group()
def task() -> None:
    """Add, list, show, cancel and retry a citizen's tasks."""


task.add_command(show)


def _owner(name: str) -> tuple[int, int] | None:
    """Root (an operator with sudo) writes on the citizen's behalf: the citizen owns what
    root creates or rewrites in its home, so its daemon can go on writing them."""
    home = paths.home(name)
    return (home.dir.stat().st_uid, home.dir.stat().st_gid) if os.geteuid() == 0 else None


def daemon_hint(name: str) -> str:
    """Whether citizen NAME's daemon runs (read as `citizen status` reads it) and, if not,
    the command that starts it."""
    beat = daemon(paths.home(name))
    if beat.running:
        return f"its daemon is {beat.text} and wakes for it within seconds"
    start = (f"sudo systemctl start citizen@{name}" if server_mode()
             else command(f"run {name}"))
    return (f"its daemon is {beat.text}: nothing works on the task until you start it with "
            f"`{start}` (or run one wake now: `{command(f'wake {name} --type TASK')}`)")


def _text(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value.strip():
        raise click.BadParameter("the task's text is empty - say what the citizen should do, "
                                 "e.g. \"Write notes/hello.md saying hello to mira\"")
    return value


@task.command("add")
@citizen_argument
@click.argument("text", callback=_text)
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
                                   f"`{command('init')}` first")
    queued = TaskQueue(home.tasks).add(text, kind=kind, source="cli", owner=_owner(name))
    ring_as_operator(name, kind, f"task {queued.id}")
    click.echo(f"queued {queued.id} for {name}; {daemon_hint(name)}")
    click.echo(f"see it: {command(f'task show {name} {queued.id}')}")


@task.command("list")
@citizen_argument
@click.option("--state", "states", multiple=True, type=click.Choice(LISTED),
              help="Only tasks in this state (repeatable).")
@json_option
@wide_option
def list_tasks(name: str, states: tuple[str, ...], as_json: bool, wide: bool) -> None:
    """List citizen NAME's tasks, oldest first within each state.

    \b
    Examples:
      citizen task list opus
      citizen task list opus --state queue --state active
      citizen task list opus --state failed --json
    """
    tasks = TaskQueue(paths.home(name).tasks)
    rows, broken = [], []
    for state in states or LISTED:
        for tid in tasks.ids(state):
            try:
                rows.append((state, tid, tasks.load(state, tid)))
            except CorruptFile as exc:  # the citizen's file: reported, left as it is
                broken.append({"state": state, "id": tid, "problem": exc.problem})
    if as_json:
        click.echo(json.dumps([{"state": s, **t.to_dict()} for s, _, t in rows]
                              + [{**b, "corrupt": True} for b in broken]))
        return
    # The ID is the file's name (what `task show ID` looks up), quoted as a shell word:
    # the citizen names its files, and an operator pastes the ID into a command line.
    table(("STATE", "ID", "KIND", "CREATED", "ATTEMPTS", "TEXT / RESULT"),
          [(s, shlex.quote(tid), t.kind, age(t.created), t.attempts,
            t.text if not t.result else f"{t.text} -> {t.result}") for s, tid, t in rows]
          + [(b["state"], shlex.quote(b["id"]), "?", "-", "-", f"unreadable: {b['problem']}")
             for b in broken],
          wide=wide, empty="no tasks" + (f" in state {', '.join(states)}" if states else ""))


@task.command("cancel")
@citizen_argument
@click.argument("task_id", metavar="ID")
def cancel(name: str, task_id: str) -> None:
    """Cancel task ID of citizen NAME: it is never picked up again.

    A queued or held task is filed cancelled at once. The task a wake is working on right
    now is asked to stop: the wake ends at its next turn (never in the middle of a tool
    call, so no step is left half done) and files it cancelled, with what it did so far
    in its log. Stopping the whole wake instead would kill the daemon's other work too,
    and refusing would leave the operator waiting on a task they no longer want.

    \b
    Example:
      citizen task cancel opus t-20261122T120000.123456-1a2b3c
    """
    tasks = TaskQueue(paths.home(name).tasks)
    task_or_exit(name, tasks, task_id)  # exit 2 for an id that is not there
    try:
        found, outcome = taskops.cancel(tasks, task_id, wake_running=_wake_running(name),
                                        by=operator(), owner=_owner(name))
    except taskops.TaskFinished as exc:
        raise click.ClickException(str(exc)) from exc
    except (CorruptFile, TaskError) as exc:
        raise click.ClickException(clean(str(exc))) from exc
    if outcome == "cancelled":
        click.echo(f"cancelled {found.id}; it will not be picked up again")
        return
    ring_as_operator(name, "TASK", f"task {found.id} cancelled")
    follow = command(f"task show {name} {task_id}")
    click.echo(f"asked the wake working on {found.id} to stop: it ends at its next turn and "
               f"files the task cancelled - follow it with `{follow}`")


@task.command("retry")
@citizen_argument
@click.argument("task_id", metavar="ID")
def retry(name: str, task_id: str) -> None:
    """Put failed (or cancelled) task ID of citizen NAME back in the queue and ring.

    Its history keeps what happened; its attempt and model-call counters start again
    (their old values are in the history).

    \b
    Example:
      citizen task retry opus t-20261122T120000.123456-1a2b3c
    """
    tasks = TaskQueue(paths.home(name).tasks)
    task_or_exit(name, tasks, task_id)
    try:
        found = taskops.retry(tasks, task_id, by=operator(), owner=_owner(name))
    except (CorruptFile, TaskError) as exc:
        raise click.ClickException(clean(str(exc))) from exc
    ring_as_operator(name, found.kind, f"task {found.id} retried")
    click.echo(f"queued {found.id} again for {name}; {daemon_hint(name)}")


def _wake_running(name: str) -> bool:
    """Whether a wake of citizen NAME is running now: a recent log without its end whose
    process is alive (a crashed wake's log also lacks the end, but its pid is gone)."""
    for path in wakelog.wake_logs(paths.home(name))[-3:]:
        first, last = wakelog.first_and_last(path)
        pid = first.get("pid")
        if last.get("event") != "wake_end" and isinstance(pid, int) and alive(pid):
            return True
    return False
