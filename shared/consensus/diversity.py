"""Weight diversity enforcement: the seed's mitigation for groupthink and weight collapse.

"Periodically inject small random perturbations to prevent convergence" (Failure Modes
§3) and "agents must maintain minimum distance in weight space" (§5, target σ > 0.15
per value). Once a world day, for each value whose spread across the citizens (σ) has
fallen below its floor, every citizen's weight for it takes a small random step away
from the mean (within its bounds, at most STEP), recorded in the weight history like
any adjustment: episode `diversity-<day>`, approved by `diversity`.

The floor of a value is the seed's σ or, when the role profiles themselves start
closer than that (truth, bounded to [0.7, 1.0] for everyone, cannot reach 0.15), the
profiles' own spread: the rule prevents convergence from where the civilization
started; it does not push everyone to their bounds chasing a spread the bounds forbid.
The random draw is seeded by the day and value, so every daemon that runs the job
computes the same steps, and a lock plus the day's episode id make it happen once.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import Any

from shared.atomic import APPEND_WAIT_S
from shared.consensus.values import Weights
from shared.consensus.weighing import DIVERSITY, DIVERSITY_STEP

STEP = DIVERSITY_STEP  # at most half the largest step an episode may make
MIN_STEP = 0.02  # below this a perturbation is noise the weights' rounding eats
AUTHOR = DIVERSITY.rstrip("-")  # the `approved_by` of its steps; their episode: diversity-<day>
TOLERANCE = 1e-3  # σ is kept rounded to 4 places; a profile's own spread is not "below" it


def enforce(weights: Weights, citizens: Sequence[str], day: str,
            target: float) -> list[dict[str, Any]]:
    """Today's perturbations (module doc); [] when none is due or they were made today."""
    if len(citizens) < 2:
        return []
    episode = f"{DIVERSITY}{day}"
    # One lock for the check and the writes: every daemon runs this job each day. Waited
    # for at most APPEND_WAIT_S: any citizen can open (so hold) it, and the scheduler runs
    # this job for everyone - a LockTimeout is logged, and tomorrow's run tries again.
    # (`Weights.lock`: the history's flock on one server, a lease on several.)
    with weights.lock(APPEND_WAIT_S):
        if any(line.get("approved_by") == AUTHOR and isinstance(line.get("episodes"), list)
               and line["episodes"][:1] == [episode] for line in weights.history()):
            return []  # done today (a line of another author, or a string, proves nothing)
        sigma = weights.diversity(citizens)
        low = [v for v, floor in weights.floors(target).items()
               if sigma[v] < floor - TOLERANCE]
        return [line for v in low for line in _spread(weights, citizens, v, episode,
                                                      sigma[v])]


def _spread(weights: Weights, citizens: Sequence[str], value: str, episode: str,
            sigma: float) -> list[dict[str, Any]]:
    now = {c: weights.current(c)[value] for c in citizens}
    mean = statistics.fmean(now.values())
    rng = random.Random(f"{episode}:{value}")  # noqa: S311 - a perturbation, not a secret
    made = []
    for c in sorted(citizens):
        away = now[c] - mean
        sign = (1.0 if away > 0 else -1.0) if abs(away) > 1e-9 else rng.choice((1.0, -1.0))
        low, high = weights.framework.bounds[weights.profile(c)][value]
        delta = round(max(low, min(high, now[c] + sign * rng.uniform(MIN_STEP, STEP)))
                      - now[c], 4)
        if abs(delta) < MIN_STEP / 2:
            continue  # at its bound: the others move
        made.append(weights.adjust(c, value, delta, episodes=[episode], approved_by=AUTHOR,
                                   reason=f"diversity: σ of {value} was {sigma:.3f}, "
                                          "under its floor"))
    return made
