"""`debate_start`: open a structured debate with peers (`shared.debates`)."""

from __future__ import annotations

from citizen import civilization, config
from citizen.home import spend
from citizen.tools.base import ToolEnv, ToolFailure, tool


# A debate spends peers' wakes and budgets: only if the operator grants it.
@tool(permission="can_start_debates")
def debate_start(env: ToolEnv, topic: str, participants: str) -> str:
    """Start a structured debate to find the real crux of a disagreement: stages,
    steelmans, commitments and falsifiers; the result is a crux others can check.

    :param topic: what is disputed, in one sentence
    :param participants: other citizens to debate with, comma-separated (1-4 of them)
    """
    me = env.home.name
    try:
        spend.allow(env.home, "debate", env.config.budget.max_debates_per_day)
    except spend.CapReached as exc:
        raise ToolFailure(str(exc)) from exc
    names = [me, *[p.strip() for p in participants.split(",") if p.strip() and p.strip() != me]]
    tpl = config.templates()
    commons = civilization.commons(tpl)
    d = commons.debates.start(topic, names, me,
                              personas={n: civilization.persona(tpl, n) for n in names},
                              usd_cap=env.config.budget.max_usd_per_debate)
    spend.opened(env.home, "debate", topic)
    commons.ring(me, "DEBATE", f"debate {d.id} started", sender=me)
    return f"started {d.id} among {', '.join(d.participants)}; you move first"
