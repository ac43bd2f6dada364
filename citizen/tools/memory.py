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
    env.contexts[context].add(text.strip())
    return f"added to {context}"


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
