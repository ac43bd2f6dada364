"""A task's working state, kept in the `working` context while the task lasts.

A task that spans wakes must not start over: its progress notes, the files it wrote,
its last tool results and what is left live in the `working` context (which every call
of the wake carries), rewritten as the work goes - at each progress note and at the end
of each wake - and cleared when the task is filed. Its task history stays the record;
this is the citizen's view of it.
"""

from __future__ import annotations

from collections.abc import Mapping

from citizen.home.contexts import Context
from citizen.home.tasks import Task

TASK_CHARS = 600  # of the task's text in the working context (the prompt has it whole)
MAX_LINES = 60  # of what was done, the newest (the task's own file keeps all of it)
LINE_CHARS = 600


def progress_so_far(task: Task) -> str:
    """What earlier wakes and this one did on the task ("" if nothing yet): its progress
    notes, how each wake ended, the files written and the last results."""
    lines, touched = [], []
    for h in task.history:
        if h.get("event") == "progress":
            lines.append(f"- progress: {h.get('note', '')}")
        elif h.get("event") == "wake":
            lines.append(f"- wake {h.get('wake')} ended: {h.get('note', '')}")
            touched += [t for t in h.get("touched", ()) if t not in touched]
            lines += [f"  last: {r}" for r in h.get("last", ())]
    if not lines:
        return ""
    files = f"\nFiles you have written for it: {', '.join(touched)}." if touched else ""
    return "\n".join(lines) + files


def remember(contexts: Mapping[str, Context], task: Task) -> None:
    """Write the task's working state into the `working` context (replacing whatever
    it held: one task is worked on at a time): the task first, then one entry per line
    of what was done, the newest MAX_LINES, so a prompt budget that cannot take it all
    keeps the task and the newest of it."""
    ctx = contexts.get("working")
    if ctx is None:
        return
    ctx.entries = []
    ctx.add(f"Task {task.id}, in progress: {task.text[:TASK_CHARS]}", task=task.id, pinned=True)
    so_far = progress_so_far(task)
    if so_far:
        ctx.add("Done so far (carry on from here; read what you wrote rather than starting "
                "over):", task=task.id)
        for line in so_far.splitlines()[-MAX_LINES:]:
            ctx.add(line.lstrip("- ")[:LINE_CHARS], task=task.id)


def clear(contexts: Mapping[str, Context]) -> None:
    """The task is filed: its working state goes (the strategy clear_on_task_complete)."""
    ctx = contexts.get("working")
    if ctx is not None:
        ctx.entries = []
