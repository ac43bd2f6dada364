"""Task tools: report progress, finish, or say you are stuck."""

from __future__ import annotations

from citizen.home import working
from citizen.home.tasks import Task
from citizen.tools import evidence, shell
from citizen.tools.base import ToolEnv, ToolFailure, tool

CHECK_TIMEOUT_S = 300  # a task's named command (its test suite) gets this long to pass


def _active(env: ToolEnv) -> Task:
    if env.task is None:
        raise ToolFailure("there is no active task in this wake")
    if env.task_outcome is not None:
        raise ToolFailure(f"the task is already finished ({env.task_outcome[0]})")
    return env.task


@tool
def task_progress(env: ToolEnv, note: str) -> str:
    """Record progress on the current task (what you did, what is next).

    :param note: a short progress note
    """
    task = _active(env)
    env.tasks.progress(task, note)
    working.remember(env.contexts, task)  # written as the work goes, not only at the end
    return "progress recorded"


@tool
def task_complete(env: ToolEnv, summary: str) -> str:
    """Mark the current task as done, with a summary of the result for whoever asked.

    :param summary: the result: what was done and where it is
    """
    task = _active(env)
    if not evidence.settle(task.meta, task.text,
                           env.verify.extract if env.verify is not None else None):
        raise ToolFailure("not filed yet: what the task asks for could not be read (the "
                          "model is unavailable or a limit is reached); it is read again "
                          "when the task continues")
    wanted = task.meta.get("deliverables") or {}
    problems, proof, files = evidence.check(
        env.home.dir, wanted,
        evidence.touched(task.history, env.log.path if env.log is not None else None),
        summary=summary, run=lambda line, cwd: shell.run(env, line, CHECK_TIMEOUT_S, cwd))
    verdict, why = "unverified", "no verifier in this call"
    if not problems:
        if env.verify is not None:
            verdict, why = env.verify(task.text, summary, proof, files)
        if verdict == "fail":
            problems = [f"a verifier who did not do the work says: {why}"]
        elif verdict != "pass":
            # "done" needs a second opinion: a verifier that is down, over a limit or
            # absent is no verdict, so the task stays open (not counted as a refused
            # claim: the worker did no wrong) and the claim is judged when it continues.
            env.tasks.progress(task, f"claimed done; not verified yet: {why}")
            raise ToolFailure(f"not filed yet: the evidence holds, but the verifier could "
                              f"not be asked ({why}); the task stays open and the claim "
                              "is judged when it continues")
    if problems:
        refused = int(task.meta.get("refused_done", 0)) + 1
        task.meta["refused_done"] = refused
        env.tasks.progress(task, f"claimed done, refused: {'; '.join(problems)}")
        if refused >= evidence.MAX_REFUSALS:
            env.task_outcome = ("failed", f"claimed done {refused} times, but "
                                f"{'; '.join(problems)}")
            return "the task is filed as failed: what it asks for is not there"
        raise ToolFailure(f"not done: {'; '.join(problems)}. Make it, or call task_stuck "
                          "with the reason if you cannot")
    lines = [f"- {e}" for e in proof]
    lines.append(f"- verifier: {verdict} - {why}")
    result = summary + ("\n\nEvidence (checked):\n" + "\n".join(lines) if lines else "")
    env.task_outcome = ("done", result)
    return "task marked complete; end your turn"


@tool
def task_stuck(env: ToolEnv, reason: str) -> str:
    """Give up on the current task because you cannot go on, saying why.

    :param reason: what blocks you and what would unblock you
    """
    _active(env)
    env.task_outcome = ("stuck", reason)
    return "task marked stuck; end your turn"
