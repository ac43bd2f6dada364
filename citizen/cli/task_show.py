"""`citizen task show`: one task's whole story - its text, state and history, the wakes
that worked on it (from their logs), what it must deliver and how "done" was checked."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from citizen.cli.options import citizen_argument, json_option
from citizen.cli.terminal import NoSuch, age, clean, command, table, wide_option
from citizen.config import paths
from citizen.home import wakelog
from citizen.home.tasks import Task, TaskQueue
from shared.atomic import CorruptFile

SLACK_S = 3600.0  # a log last written this long before the task was made cannot hold it


def task_or_exit(name: str, tasks: TaskQueue, task_id: str) -> str:
    """The state task `task_id` is in; exit 2 (no such thing) when there is none."""
    state = tasks.where(task_id) if "/" not in task_id and task_id.startswith("t-") else None
    if state is None:
        raise NoSuch(f"citizen {name} has no task {clean(task_id)!r} - list its tasks with "
                     f"`{command(f'task list {name}')}`")
    return state


def wakes_of(name: str, task: Task) -> list[dict[str, Any]]:
    """The wakes whose logs record work on `task` ("task" events naming it), oldest first.
    Only logs written since the task was made are read."""
    since = _epoch(task.created) - SLACK_S
    out = []
    for path in wakelog.wake_logs(paths.home(name)):
        if path.stat().st_mtime < since:
            continue
        events = wakelog.read(path)
        marks = [e for e in events if e.get("event") == "task" and e.get("id") == task.id]
        if not marks:
            continue
        row = wakelog.summary(path)
        out.append({"wake": row["wake"], "type": row["type"], "started": row["started"],
                    "status": row["status"], "calls": row["calls"],
                    "cost_usd": row["cost_usd"],
                    "transitions": [str(e.get("transition", "")) for e in marks],
                    "summary": next((str(e["summary"]) for e in reversed(marks)
                                     if e.get("summary")), ""),
                    "log": command(f"logs {name} --wake {row['wake']}")})
    return out


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return 0.0  # an edited date: read every log rather than miss one


def verification(task: Task) -> dict[str, Any]:
    """What "done" is checked against and what the checks said: the deliverables fixed
    when the task was taken, each claim of done that was refused or left unverified, and
    the evidence filed with the result."""
    claims = [{"ts": h.get("ts", ""), "note": str(h.get("note", ""))} for h in task.history
              if str(h.get("note", "")).startswith("claimed done")]
    _, _, evidence = task.result.partition("Evidence (checked):")
    return {"deliverables": task.meta.get("deliverables"), "claims": claims,
            "evidence": [line.removeprefix("- ") for line in evidence.strip().splitlines()]}


def facts(name: str, tasks: TaskQueue, task_id: str) -> dict[str, Any]:
    state = task_or_exit(name, tasks, task_id)
    try:
        task = tasks.load(state, task_id)
    except CorruptFile as exc:  # the citizen may edit its task files: reported, kept
        raise click.ClickException(clean(str(exc))) from exc
    return {"state": state, **task.to_dict(), "cancel_requested": state == "active" and
            tasks.cancel_requested(task_id), "wakes": wakes_of(name, task),
            "verification": verification(task)}


@click.command("show")
@citizen_argument
@click.argument("task_id", metavar="ID")
@json_option
@wide_option
def show(name: str, task_id: str, as_json: bool, wide: bool) -> None:
    """Show task ID of citizen NAME: text, state, history, the wakes that worked on it,
    its deliverables and how they were verified.

    \b
    Examples:
      citizen task show opus t-20261122T120000.123456-1a2b3c
      citizen task show opus t-20261122T120000.123456-1a2b3c --json
    """
    f = facts(name, TaskQueue(paths.home(name).tasks), task_id)
    if as_json:
        click.echo(json.dumps(f, indent=2))
        return
    out = click.echo
    out(clean(f"task {f['id']} of {name}: {f['state']}"
              + (" (cancel requested: the wake stops at its next turn)"
                 if f["cancel_requested"] else "")))
    out(clean(f"kind {f['kind']}, from {f['source']}, created {age(f['created'])}, "
              f"{f['attempts']} attempt(s), {f['meta'].get('calls', 0)} model call(s)"))
    out("\ntext:\n" + _indent(f["text"]))
    if f["result"]:
        out("\nresult:\n" + _indent(f["result"]))
    out("\nhistory:")
    table(("WHEN", "EVENT", "DETAIL"),
          [(age(h.get("ts")), h.get("event", "?"), _detail(h)) for h in f["history"]],
          wide=wide, empty="  (none)")
    out("\nwakes that worked on it:")
    table(("WAKE", "TYPE", "STARTED", "STATUS", "CALLS", "DID"),
          [(w["wake"], w["type"], age(w["started"]), w["status"], w["calls"],
            ", ".join(w["transitions"])) for w in f["wakes"]],
          wide=wide, empty="  (none yet)")
    if f["wakes"]:
        last = f["wakes"][-1]["wake"]
        out(f"  a wake's transcript: {command(f'logs {name} --wake {last}')}")
    check = f["verification"]
    wanted = check["deliverables"] or {}
    out("\ndeliverables (fixed when the task was taken):")
    if not wanted:
        out("  (not read yet: fixed when a wake takes the task)")
    for file in wanted.get("files", []):
        out(clean(f"  file {file}"))
    for c in wanted.get("commands", []):
        out(clean(f"  command `{c.get('run')}`" + (f" in {c['cwd']}" if c.get("cwd") else "")))
    if wanted.get("answer"):
        out("  an answer to its question")
    out("\nverification:")
    for claim in check["claims"]:
        out(clean(f"  {age(claim['ts'])}: {claim['note']}"))
    for line in check["evidence"]:
        out(clean(f"  {line}"))
    if not check["claims"] and not check["evidence"]:
        out("  (no claim of done yet)")


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in clean(text).splitlines())


def _detail(entry: dict[str, Any]) -> str:
    return "; ".join(f"{k} {v}" for k, v in entry.items()
                     if k not in ("ts", "event") and v not in ("", None))

