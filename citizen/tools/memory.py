"""Memory tools: search what you remember, and write into your context files."""

from __future__ import annotations

import json
from typing import Literal

from citizen.tools.base import ToolEnv, ToolFailure, tool


@tool(reads=True, cacheable=True)
def memory_search(env: ToolEnv, query: str, limit: int = 8) -> str:
    """Search your memory (raw wake notes and daily, weekly, monthly summaries) by words.

    :param query: words to look for
    :param limit: how many hits to return
    """
    hits = env.memory.search(query, max(1, min(limit, 25)))
    return json.dumps(hits, ensure_ascii=False) if hits else "no matches"


@tool
def context_add(env: ToolEnv,
                context: Literal["history", "goals", "relationships", "skills", "dreams"],
                text: str) -> str:
    """Add an entry to one of your context files (your long-term self).

    :param context: which context: history, goals, relationships, skills or dreams
    :param text: the entry to add
    """
    if not text.strip():
        raise ToolFailure("the entry is empty")
    # A goal starts open; goal_complete closes it, and the goals context's forgetting
    # (archive_completed) moves the completed ones to contexts/archive/goals.jsonl.
    extra = {"status": "open"} if context == "goals" else {}
    env.contexts[context].add(text.strip(), **extra)
    return f"added to {context}"


@tool
def goal_complete(env: ToolEnv, goal: str, outcome: str) -> str:
    """Mark one of your goals completed (it is archived when your goals context fills up).

    :param goal: words from the goal's text, enough to name exactly one open goal
    :param outcome: what was achieved, and where the evidence is
    """
    want = " ".join(goal.lower().split())
    if not want or not outcome.strip():
        raise ToolFailure("name the goal (words from its text) and say what was achieved")
    goals = env.contexts["goals"].entries
    open_goals = [e for e in goals if e.get("status") != "completed"]
    found = [e for e in open_goals if want in " ".join(e["text"].lower().split())]
    if len(found) != 1:
        listed = "; ".join(e["text"][:80] for e in open_goals[:10]) or "none"
        raise ToolFailure(f"{len(found)} open goals contain '{goal}' - give words from "
                          f"exactly one (open goals: {listed})")
    found[0].update(status="completed", outcome=outcome.strip()[:500])
    return f"goal completed: {found[0]['text'][:200]}"


@tool
def identity_update(env: ToolEnv, text: str) -> str:
    """Rewrite your identity statement (the old one is kept in your history).

    :param text: the complete new identity statement
    """
    if len(text.strip()) < 40:
        raise ToolFailure("an identity statement needs at least a few sentences")
    identity = env.contexts["identity"]
    old = " ".join(e["text"] for e in identity.entries)
    env.contexts["history"].add(f"My identity until now: {old}")
    identity.entries = []
    identity.add(text.strip())
    return "identity updated"
