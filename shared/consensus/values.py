"""Frozen values, mutable weights (the Thought World value framework).

`templates/values.yaml` holds the base values (frozen) and, per role profile, the
starting weights and their bounds. A citizen's current weights are its profile's
plus every adjustment in `shared/values/weight_history.jsonl` - each line applied
only if it keeps the weight within the profile's bounds, so even a hand-edited
history can never push a weight outside them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shared import clock
from shared.atomic import append_line, make_dirs, read_jsonl
from shared.errors import Invalid
from shared.layout import Layout

MAX_STEP = 0.1  # one adjustment moves a weight by at most this much
DIVERSITY = "diversity-"  # the episode prefix of the daily diversity job's steps
DIVERSITY_STEP = 0.05  # at most half the largest step an episode may make
# ... and a participant's value moves at most once per episode (the seed: "±0.1 per
# episode"): an integrator listing the same value twice must not move it 0.2.
HISTORY_MODE = 0o664  # appended by every integrator (group `citizens`), read by all



@dataclass(frozen=True)
class Framework:
    """The base values and the role profiles."""

    base_values: dict[str, str]
    profiles: dict[str, dict[str, float]]
    bounds: dict[str, dict[str, tuple[float, float]]]
    min_sigma: float = 0.15  # the seed's diversity target per value (shared.consensus.diversity)

    @classmethod
    def load(cls, path: Path) -> Framework:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        roles = data["agent_roles"]
        return cls(dict(data["base_values"]),
                   {r: {v: float(w) for v, w in p["weights"].items()} for r, p in roles.items()},
                   {r: {v: (float(b[0]), float(b[1])) for v, b in p["bounds"].items()}
                    for r, p in roles.items()},
                   float((data.get("diversity") or {}).get("min_stddev_per_value", 0.15)))


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


def _spreads(weights: Mapping[str, Mapping[str, float]], citizen: str, value: str,
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


def _episode(line: Mapping[str, Any]) -> str:
    """The episode a history line belongs to (its first cited episode)."""
    episodes = line.get("episodes")
    return str(episodes[0]) if isinstance(episodes, list) and episodes else ""


class Weights:
    """Every citizen's weights, derived from its profile and the history.

    The history is one file every integrator appends to (group `citizens`), so a line
    proves nothing by being there: it moves a weight only if `vouch` confirms it (the
    commons checks it against its episode's record: that proposal's integrator approved
    exactly this adjustment) or it is a diversity step the replay itself would allow
    (`DIVERSITY`: the value's spread under its floor at that point, away from the mean,
    at most DIVERSITY_STEP). Malformed lines are skipped. The replay is cached until the
    history or the episode log changes.
    """

    def __init__(self, shared_dir: Path, framework: Framework,
                 profiles: Mapping[str, str],
                 vouch: Callable[[Mapping[str, Any]], bool] | None = None) -> None:
        self.history_path = Layout(shared_dir).weight_history
        self.episodes_path = Layout(shared_dir).episodes  # a vouch's evidence
        self.framework = framework
        self.profiles = dict(profiles)  # citizen -> profile name (executor, verifier, …)
        self.vouch = vouch
        self._key: tuple[int, ...] = ()
        self._replayed: dict[str, dict[str, float]] = {}

    def profile(self, citizen: str) -> str:
        return self.profiles.get(citizen, "integrator")

    def history(self) -> list[dict[str, Any]]:
        """The well-formed lines of the history (anything else is skipped)."""
        if not self.history_path.exists():
            return []
        out = []
        for line in read_jsonl(self.history_path):
            if isinstance(line, dict) and isinstance(line.get("citizen"), str) \
                    and isinstance(line.get("value"), str) \
                    and isinstance(line.get("delta"), int | float) \
                    and isinstance(line.get("episodes"), list) and line["episodes"] \
                    and all(isinstance(e, str) for e in line["episodes"]):
                out.append(line)
        return out

    def current(self, citizen: str) -> dict[str, float]:
        key = (*_stat(self.history_path), *_stat(self.episodes_path))
        if key != self._key:
            self._replayed, self._key = self._replay(), key
        return dict(self._replayed.get(citizen) or self._start(citizen))

    def _start(self, citizen: str) -> dict[str, float]:
        return dict(self.framework.profiles[self.profile(citizen)])

    def floors(self, target: float) -> dict[str, float]:
        """Each value's σ floor: the seed's target, or the starting profiles' spread if
        lower (the bounds may not allow the target: truth is [0.7, 1.0] for all)."""
        start = [self._start(c) for c in self.profiles]
        return {v: min(target, statistics.pstdev(p[v] for p in start)) if len(start) > 1
                else 0.0 for v in self.framework.base_values}

    def _replay(self) -> dict[str, dict[str, float]]:
        weights = {c: self._start(c) for c in self.profiles}
        floors = self.floors(self.framework.min_sigma)
        moved: set[tuple[str, str, str]] = set()  # (citizen, value, episode): once each
        for line in self.history():
            citizen, value, episode = line["citizen"], line["value"], _episode(line)
            if value not in self.framework.base_values:
                continue
            row = weights.setdefault(citizen, self._start(citizen))
            delta = float(line["delta"])
            new = round(row[value] + delta, 4)
            low, high = self.framework.bounds[self.profile(citizen)][value]
            if not (low <= new <= high and abs(delta) <= MAX_STEP + 1e-9) \
                    or (citizen, value, episode) in moved:
                continue
            if episode.startswith(DIVERSITY):
                ok = line.get("approved_by") == DIVERSITY.rstrip("-") and _spreads(
                    weights, citizen, value, delta, floors[value])
            else:
                ok = self.vouch is None or self.vouch(line)
            if ok:
                row[value] = new
                moved.add((citizen, value, episode))
        return weights

    def adjust(self, citizen: str, value: str, delta: float, *, episodes: list[str],
               approved_by: str, reason: str) -> dict[str, Any]:
        """Record one adjustment approved by the integrator `approved_by`.

        :raises Invalid: unknown value, no cited episode, a step over MAX_STEP, the
            integrator adjusting itself, or a result outside the profile's bounds.
        """
        if value not in self.framework.base_values:
            raise Invalid(f"'{value}' is not a base value "
                              f"({', '.join(self.framework.base_values)})")
        if not episodes:
            raise Invalid("a weight change must cite the episodes that motivate it")
        if approved_by == citizen:
            raise Invalid(f"{citizen} cannot approve a change to its own weights")
        if abs(delta) > MAX_STEP + 1e-9:
            raise Invalid(f"a step of {delta:+.2f} is over the limit of ±{MAX_STEP}")
        if any(line.get("citizen") == citizen and line.get("value") == value
               and _episode(line) == episodes[0] for line in self.history()):
            raise Invalid(f"{citizen}'s {value} has already moved in {episodes[0]}: at most "
                          f"one adjustment per value per participant per episode")
        old = self.current(citizen)[value]
        new = round(old + delta, 4)
        low, high = self.framework.bounds[self.profile(citizen)][value]
        if not low <= new <= high:
            raise Invalid(f"{citizen}'s {value} would become {new:.2f}, outside its "
                              f"bounds [{low}, {high}]")
        line = {"ts": clock.now(), "citizen": citizen,
                "value": value, "old": old, "new": new, "delta": delta, "episodes": episodes,
                "approved_by": approved_by, "reason": reason[:500]}
        make_dirs(self.history_path.parent)
        append_line(self.history_path, line, mode=HISTORY_MODE)
        return line

    def diversity(self, citizens: Iterable[str]) -> dict[str, float]:
        """Standard deviation of each value's weight across citizens (seed: σ > 0.15)."""
        rows = [self.current(c) for c in citizens]
        if len(rows) < 2:
            return {v: 0.0 for v in self.framework.base_values}
        return {v: round(statistics.pstdev(r[v] for r in rows), 4)
                for v in self.framework.base_values}


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
