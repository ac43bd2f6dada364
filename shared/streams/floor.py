"""Who has the floor after a stream's decision (§0.2 floor control), a pure rule.

The decision grants the floor; a room's governance may open it further - a denied
claimer that says it must speak, where overrides are allowed (balanced), and a
citizen that bids after the decision, where interruptions are enabled (anarchic) -
and the moderator closes it (§0.3): a citizen silenced, or a room paused, after the
stream opened speaks no more. No files here (`shared.streams.store` keeps them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from shared.streams.decision import Settings, Stream, confidence, min_confidence

GRANTED, OVERRIDE, INTERRUPTION = "granted", "override", "interruption"


def moderated(s: Stream, room: Settings) -> Stream:
    """`s` under its room's moderation now: silenced there since it opened, or paused."""
    silenced = tuple(sorted({*s.settings.silenced, *room.silenced}))
    return replace(s, settings=replace(s.settings, silenced=silenced, paused=room.paused))


def silenced_during(history: Sequence[tuple[float, Iterable[str]]], start: float,
                    end: float) -> set[str]:
    """Everyone the room had silenced at some moment in [`start`, `end`] (seconds since
    the epoch). `history`: the room's silenced sets, each with the time it took effect,
    oldest first - a decision names the silence it applied, and a silence lifted since
    must not make it unsound (nor a silence that never overlapped it, sound)."""
    out: set[str] = set()
    for i, (at, names) in enumerate(history):
        until = history[i + 1][0] if i + 1 < len(history) else math.inf
        if at <= end and until >= start:
            out |= set(names)
    return out


def floor(s: Stream, decision: Mapping[str, Any], citizen: str) -> str:
    """Why `citizen` may speak on the decided stream `s` (GRANTED, OVERRIDE,
    INTERRUPTION), or '' - `s` as `moderated` gives it, so a moderator's silence or
    pause after the decision holds too. Without coordination a claimer has the floor
    by its claim, decided or not."""
    if s.settings.paused or citizen in s.settings.silenced:
        return ""
    t = s.thoughts.get(citizen)
    # no coordination (§1.1's baseline): every claimer speaks
    uncoordinated = not s.settings.coordinate and t is not None and t.claiming
    if uncoordinated or citizen in decision.get("granted", ()):
        return GRANTED
    if t is None or not t.claiming or confidence(s, t) < min_confidence(s):
        return ""
    if s.settings.allow_overrides and t.override and citizen in decision.get("denied", ()):
        return OVERRIDE
    considered: Iterable[str] = decision.get("considered", ())
    if s.settings.enable_interruptions and citizen not in considered:
        return INTERRUPTION  # it bid after the decision was made: an interjection
    return ""
