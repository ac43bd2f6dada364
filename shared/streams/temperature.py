"""A room's temperature and a bid's load factor (§8.3, §8.6, §10.4), pure arithmetic.

A room warms with activity and cools ×0.95 every 10 s without it; the rooms' document
(`rooms`) stores the temperature, this computes it.
"""

from __future__ import annotations

from collections.abc import Iterable

DECAY, DECAY_EVERY_S, FLOOR, START = 0.95, 10.0, 0.01, 0.5


def cooled(temperature: float, updated: float, now: float) -> float:
    """×0.95 for every whole 10 s without activity, never below the floor."""
    steps = max(0, int((now - updated) // DECAY_EVERY_S))
    return max(FLOOR, temperature * DECAY ** steps) if steps else temperature


def warmed(temperature: float, event: str) -> float:
    delta = {"human": 0.3, "serviced": -0.2, "present": 0.2, "absent": -0.4}[event]
    return max(FLOOR, min(1.0, temperature + delta))


def load_factor(mine: int, counts: Iterable[int]) -> float:
    """§10.4: favour the under-used. 1.0 at the average of recent answers, ±0.2 per
    average's worth above or below it, within [0.8, 1.2]."""
    values = list(counts)
    avg = sum(values) / len(values) if values else 0.0
    return min(1.2, max(0.8, 1.0 - 0.2 * (mine - avg) / max(avg, 1.0)))


def temperature_bias(temperature: float) -> float:
    """How the room's temperature moves a bid (§8.6): hot rooms +0.15, cold ones −0.1."""
    if temperature >= 0.7:
        return 0.15
    if temperature <= 0.3:
        return -0.1
    return 0.0
