"""First-wake orientation (the seed's `bootstrap.py`, "first-wake discovery"): the first
wake of a citizen that runs the tool loop is told what it is, who its peers are, which
tools it has and where things are - once.

"Once" is a mark in the home's state (`home/state.py`, under its lock), written only
after the wake's loop has ended: a wake killed or crashed before that leaves no mark, so
the next one orients again (at least once, never lost); after it, no later wake -
across daemon restarts - repeats it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from citizen import civilization, config
from citizen.config import paths
from citizen.home import state

SHOWN_PEERS = 20  # peers named by name in the orientation; the rest counted

MARK = "oriented_at_wake"


def due(marks: Mapping[str, Any]) -> bool:
    """Whether this citizen has not been oriented yet."""
    return MARK not in marks


def orientation(tpl: config.Templates, cfg: config.CitizenConfig, home: paths.Home,
                tools: Iterable[str]) -> str:
    """The orientation text (templates/prompts/bootstrap.txt) for this citizen."""
    peers = [c for c in civilization.citizens() if c != cfg.name]
    if len(peers) > SHOWN_PEERS:  # a thousand names were 2,400 tokens of a first call
        peers = [*peers[:SHOWN_PEERS], f"and {len(peers) - SHOWN_PEERS} more"]
    return tpl.prompt("bootstrap", name=cfg.name, focus=cfg.focus,
                      peers=", ".join(peers) or "none yet - you are the first",
                      tools=", ".join(sorted(tools)), code=home.code,
                      contexts=home.contexts, tasks=home.tasks, memory=home.memory,
                      commons=paths.commons_layout().root)


def done(home: paths.Home, number: int) -> None:
    """Remember that wake `number` carried the orientation to its end."""
    state.mark(home, MARK, number)
