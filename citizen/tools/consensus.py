"""`propose`: put work to the Thought World - the proposer's peers verify and integrate it
before anything runs (`shared.consensus`)."""

from __future__ import annotations

from citizen import civilization, config
from citizen.home import spend
from citizen.tools.base import ToolEnv, ToolFailure, tool


@tool
def propose(env: ToolEnv, task: str) -> str:
    """Propose work to your peers by consensus: you will write the proposal in your next
    CONSENSUS wake (seconds from now); a verifier and an integrator review it, and only
    then does it run, in the shared world repository. Use it for changes that others
    should check first, or that need a human (deletions, deployments, architecture).

    :param task: what should be done and why, as you would tell a colleague
    """
    if not task.strip():
        raise ToolFailure("say what should be done")
    me = env.home.name
    try:
        spend.allow(env.home, "proposal", env.config.budget.max_proposals_per_day)
    except spend.CapReached as exc:
        raise ToolFailure(str(exc)) from exc
    commons = civilization.commons(config.templates())
    d = commons.consensus.request(task, me, me, source={"task": env.task.id if env.task else ""})
    spend.opened(env.home, "proposal", task)
    commons.ring(me, "CONSENSUS", f"propose {d.id}", sender=me)
    return (f"opened {d.id}: {d.roles['verifier']} verifies, {d.roles['integrator']} "
            "integrates; you write the proposal in your next CONSENSUS wake")
