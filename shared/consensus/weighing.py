"""The value framework's arithmetic, pure: weights from a profile and a history in memory.

`Framework` is the frozen base values and, per role profile, the starting weights and
their bounds (parsed from `templates/values.yaml` by `values.load_framework`). A
citizen's weights are its profile's plus every history line `replay` accepts - each
applied only if it keeps the weight within the profile's bounds, so even a hand-edited
history can never push a weight outside them. No files and no clock here: the store
(`shared.consensus.values`) reads and appends the history.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from shared.errors import Invalid

MAX_STEP = 0.1  # one adjustment moves a weight by at most this much
DIVERSITY = "diversity-"  # the episode prefix of the daily diversity job's steps
DIVERSITY_STEP = 0.05  # at most half the largest step an episode may make
# ... and a participant's value moves at most once per episode (the seed: "±0.1 per
# episode"): an integrator listing the same value twice must not move it 0.2.

Vouch = Callable[[Mapping[str, Any]], bool]
# The seed's experimental rounds ("periodically try counter-intuitive weights to test
# assumptions"): every EXPERIMENT_EVERYth proposal of the commons, by its place, its
# participants weigh with their weights mirrored within their bounds (`counter`). Offset
# so it never falls on a red-team round (`rules.red_team`: places 4, 9, 14, ...).
EXPERIMENT_EVERY = 10
EXPERIMENT_AT = 7


@dataclass(frozen=True)
class Framework:
    """The base values and the role profiles."""

    base_values: dict[str, str]
    profiles: dict[str, dict[str, float]]
    bounds: dict[str, dict[str, tuple[float, float]]]
    min_sigma: float = 0.15  # the seed's diversity target per value (shared.consensus.diversity)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Framework:
        """The framework of a parsed `values.yaml`."""
        roles = data["agent_roles"]
        return cls(dict(data["base_values"]),
                   {r: {v: float(w) for v, w in p["weights"].items()} for r, p in roles.items()},
                   {r: {v: (float(b[0]), float(b[1])) for v, b in p["bounds"].items()}
                    for r, p in roles.items()},
                   float((data.get("diversity") or {}).get("min_stddev_per_value", 0.15)))

    def start(self, profile: str) -> dict[str, float]:
        """The starting weights of a profile."""
        return dict(self.profiles[profile])


def well_formed(line: Any) -> bool:
    """A history line with a citizen, a value, a numeric delta and its episodes."""
    return isinstance(line, dict) and isinstance(line.get("citizen"), str) \
        and isinstance(line.get("value"), str) \
        and isinstance(line.get("delta"), int | float) \
        and isinstance(line.get("episodes"), list) and bool(line["episodes"]) \
        and all(isinstance(e, str) for e in line["episodes"])


def episode_of(line: Mapping[str, Any]) -> str:
    """The episode a history line belongs to (its first cited episode)."""
    episodes = line.get("episodes")
    return str(episodes[0]) if isinstance(episodes, list) and episodes else ""


def spreads(weights: Mapping[str, Mapping[str, float]], citizen: str, value: str,
            delta: float, floor: float) -> bool:
    """A diversity step the job would take: the value's spread below its floor, the step
    at most DIVERSITY_STEP and away from the mean (or from it, when all sit on it)."""
    rows = [w[value] for w in weights.values()]
    if len(rows) < 2 or abs(delta) > DIVERSITY_STEP + 1e-9:
        return False
    mean = statistics.fmean(rows)
    away = weights[citizen][value] - mean
    return round(statistics.pstdev(rows), 4) < floor - 1e-3 and (
        abs(away) <= 1e-9 or (away > 0) == (delta > 0))


def floors(framework: Framework, profiles: Iterable[str], target: float) -> dict[str, float]:
    """Each value's σ floor: the seed's target, or the starting profiles' spread if lower
    (the bounds may not allow the target: truth is [0.7, 1.0] for all). `profiles` is
    each citizen's profile name."""
    start = [framework.start(p) for p in profiles]
    return {v: min(target, statistics.pstdev(p[v] for p in start)) if len(start) > 1
            else 0.0 for v in framework.base_values}


def replay(framework: Framework, profiles: Mapping[str, str],
           history: Iterable[Mapping[str, Any]], vouch: Vouch | None = None
           ) -> dict[str, dict[str, float]]:
    """Every citizen's weights after the well-formed `history` (citizen -> profile name
    in `profiles`; an unknown citizen is an integrator).

    A line proves nothing by being there: it moves a weight only if `vouch` confirms it
    or it is a diversity step the replay itself would allow (`DIVERSITY`: the value's
    spread under its floor at that point, away from the mean, at most DIVERSITY_STEP),
    and only once per citizen, value and episode, within the bounds, by at most MAX_STEP.
    """
    def profile(citizen: str) -> str:
        return profiles.get(citizen, "integrator")

    weights = {c: framework.start(profile(c)) for c in profiles}
    floor = floors(framework, (profile(c) for c in profiles), framework.min_sigma)
    moved: set[tuple[str, str, str]] = set()  # (citizen, value, episode): once each
    for line in history:
        citizen, value, episode = line["citizen"], line["value"], episode_of(line)
        if value not in framework.base_values:
            continue
        if line.get("approved_by") == citizen:  # nobody sets its own weights, whoever wrote it
            continue
        row = weights.setdefault(citizen, framework.start(profile(citizen)))
        delta = float(line["delta"])
        new = round(row[value] + delta, 4)
        low, high = framework.bounds[profile(citizen)][value]
        if not (low <= new <= high and abs(delta) <= MAX_STEP + 1e-9) \
                or (citizen, value, episode) in moved:
            continue
        if episode.startswith(DIVERSITY):
            ok = line.get("approved_by") == DIVERSITY.rstrip("-") and spreads(
                weights, citizen, value, delta, floor[value])
        else:
            ok = vouch is None or vouch(line)
        if ok:
            row[value] = new
            moved.add((citizen, value, episode))
    return weights


def adjusted(framework: Framework, citizen: str, value: str, delta: float, *,
             profile: str, current: Mapping[str, float],
             history: Iterable[Mapping[str, Any]], episodes: list[str],
             approved_by: str) -> float:
    """The weight one adjustment of `citizen`'s `value` would give (its weights now are
    `current`, its profile `profile`, the history so far `history`).

    :raises Invalid: unknown value, no cited episode, a step over MAX_STEP, the
        integrator adjusting itself, the value already moved in that episode, or a
        result outside the profile's bounds.
    """
    if value not in framework.base_values:
        raise Invalid(f"'{value}' is not a base value ({', '.join(framework.base_values)})")
    if not episodes:
        raise Invalid("a weight change must cite the episodes that motivate it")
    if approved_by == citizen:
        raise Invalid(f"{citizen} cannot approve a change to its own weights")
    if abs(delta) > MAX_STEP + 1e-9:
        raise Invalid(f"a step of {delta:+.2f} is over the limit of ±{MAX_STEP}")
    if any(line.get("citizen") == citizen and line.get("value") == value
           and episode_of(line) == episodes[0] for line in history):
        raise Invalid(f"{citizen}'s {value} has already moved in {episodes[0]}: at most "
                      f"one adjustment per value per participant per episode")
    new = round(current[value] + delta, 4)
    low, high = framework.bounds[profile][value]
    if not low <= new <= high:
        raise Invalid(f"{citizen}'s {value} would become {new:.2f}, outside its "
                      f"bounds [{low}, {high}]")
    return new


def request_problem(framework: Framework, request: Any,  # noqa: PLR0911 - one per rule
                    recorded: Callable[[], Set[str]] | None = None) -> str:
    """What is wrong with a participant's request to change its own weights (`value`,
    `delta`, `reason`, the `episodes` behind it - each one of `recorded()`, the ids of the
    episodes there are, when given), or "" when it is well-formed. A request moves
    nothing: the proposal's integrator approves it or not at its record step."""
    if not isinstance(request, Mapping):
        return "a weight request is {value, delta, reason, episodes}"
    if request.get("value") not in framework.base_values:
        return (f"weight request: '{request.get('value')}' is not a base value "
                f"({', '.join(framework.base_values)})")
    delta = request.get("delta")
    if not isinstance(delta, int | float) or isinstance(delta, bool) or delta == 0 \
            or abs(delta) > MAX_STEP + 1e-9:
        return f"weight request: delta must be a non-zero number within ±{MAX_STEP}"
    episodes = request.get("episodes")
    if not isinstance(episodes, list) or not episodes \
            or not all(isinstance(e, str) and e for e in episodes):
        return "weight request: cite the episodes that motivate it (episodes: [ids])"
    if not str(request.get("reason", "")).strip():
        return "weight request: say why (reason)"
    known = recorded() if recorded else None
    unknown = [e for e in episodes if e not in known] if known is not None else []
    if unknown:  # the seed: a request cites the episodes behind it - ones that happened
        return (f"weight request: no episode {', '.join(map(repr, unknown))} was ever "
                "recorded - cite the ids of recorded episodes (recent_episodes)")
    return ""


def experimental(place: int) -> bool:
    """Whether the proposal at `place` (0 for the commons' first) is an experimental
    round (bounded: one proposal in EXPERIMENT_EVERY, and nothing of the history moves)."""
    return place >= 0 and place % EXPERIMENT_EVERY == EXPERIMENT_AT


def counter(framework: Framework, profile: str, weights: Mapping[str, float]
            ) -> dict[str, float]:
    """Counter-intuitive weights for one experimental round: each weight mirrored within
    its profile's bounds (low + high - w), so the heaviest value becomes the lightest the
    bounds allow - never outside them."""
    out = {}
    for value, w in weights.items():
        low, high = framework.bounds[profile].get(value, (w, w))
        out[value] = round(min(high, max(low, low + high - w)), 4)
    return out


def diversity(framework: Framework, rows: list[Mapping[str, float]]) -> dict[str, float]:
    """Standard deviation of each value's weight across citizens' `rows` (seed: σ > 0.15)."""
    if len(rows) < 2:
        return {v: 0.0 for v in framework.base_values}
    return {v: round(statistics.pstdev(r[v] for r in rows), 4) for v in framework.base_values}


def best_weights(weights_by_citizen: Mapping[str, Mapping[str, float]],
                 cited: Mapping[str, Iterable[str]]) -> list[float]:
    """For each distinct value a position's holders cite, the highest weight any holder
    gives it (a value that is not a base value weighs 0), heaviest first."""
    best: dict[str, float] = {}
    for citizen, values in cited.items():
        for v in values:
            w = float(weights_by_citizen[citizen].get(v, 0.0))
            best[v] = max(best.get(v, 0.0), w)
    return sorted(best.values(), reverse=True)


def alignment(best: list[float], k: int) -> float:
    """The tiebreak score of one position: the mean of its `k` heaviest cited values
    (0 when it cites none). Both sides are scored with the same k, so neither citing
    more values nor repeating one can raise a side's score."""
    if k <= 0 or not best:
        return 0.0
    top = best[:k]
    return round(sum(top) / k, 4)
