"""A task as a chain of proposals, pure: the seed's multi-step tasks (create -> edit ->
test -> commit, no human in between) from the records in memory.

A proposal is at most MAX_ACTIONS actions; a task that needs more is a chain. The
executor's revision may say what remains of the task after it (`next_step`); once that
proposal is executed, verified and recorded, the integrator's record step opens the next
proposal of the same task for the same executor (`store.Consensus.record`). Every step is
a proposal of its own, so the same rules hold for each: its stakes, its threshold, the
gaming checks, the verifier, a human for high stakes. A rejected step ends the chain;
so does the step cap. The request of a step names its task (the first proposal's id,
which is also its workspace) and its place in the chain.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.consensus import calls
from shared.consensus.rules import Proposal

# The seed's Phase 2 test is a five-step task; past five, what remains is a new task an
# operator or citizen asks for (each step costs a whole round of model calls).
MAX_STEPS = 5
NEXT_CHARS = 400  # a `next_step` is one instruction, not a plan


def chain_of(request: Mapping[str, Any], pid: str) -> dict[str, Any]:
    """The chain a proposal's request places it in: its task (the first proposal's id),
    its step (1 for a proposal that opened the task) and the proposal before it."""
    chain = request.get("chain")
    if isinstance(chain, Mapping) and isinstance(chain.get("task"), str) \
            and isinstance(chain.get("step"), int) and chain["step"] >= 1:
        return {"task": chain["task"], "step": chain["step"],
                "previous": str(chain.get("previous", "")),
                "goal": str(chain.get("goal", request.get("task", "")))}
    return {"task": pid, "step": 1, "previous": "", "goal": str(request.get("task", ""))}


def next_step(d: Proposal) -> tuple[str, str]:
    """(what the next step of `d`'s task is, "") when the chain goes on after `d`; ("",
    why not) when its executor asked for one and it cannot be taken; ("", "") when the
    task ends here. `d` must have finished (executed and verified, or rejected)."""
    asked = str((d.revisions[-1] if d.revisions else {}).get("next_step", "")).strip()
    if not asked:
        return "", ""
    if d.result != "approved":
        return "", f"the chain stops: this step was {d.result or 'not finished'}"
    if why := calls.over(d.calls):
        return "", f"the chain stops: {why}; what remains needs a person's new task"
    step = chain_of(d.request, d.id)["step"]
    if step >= MAX_STEPS:
        return "", (f"the chain stops: the task has taken its {MAX_STEPS} steps; what "
                    "remains needs a new task")
    return asked[:NEXT_CHARS], ""


def next_request(d: Proposal, what: str, so_far: float) -> tuple[str, dict[str, Any]]:
    """The task text and chain of the proposal that follows `d` to do `what`; the chain
    carries the task's calls `so_far` (its episode's `task_calls`, the record step's in)."""
    chain = chain_of(d.request, d.id)
    step = chain["step"] + 1
    goal = chain["goal"]
    done = str((d.revisions[-1] if d.revisions else {}).get("goal", ""))
    text = (f"{goal}\n\nThis is step {step} of at most {MAX_STEPS} of this task. Step "
            f"{step - 1} ({d.id}) was executed and verified: {done}\nThis step: {what}")
    return text, {"task": chain["task"], "step": step, "previous": d.id, "goal": goal[:4000],
                  calls.CALLS: so_far}
