"""The seed's emergence indicators, computed from consensus history after the fact.

Observed, never fed back: nothing here is shown to a citizen or read by a prompt
("we measure these AFTER the fact … agents don't optimize for these metrics").

The six indicators (seed, "Emergence Indicators"), each from the records alone:
1. emergent solutions - share of decided proposals whose final actions differ from the
   first revision's (target > 40 %);
2. productive conflict - mean Quality Rubric score (`rubric`) of conflicted proposals
   against proposals approved unanimously in their first round, as a % delta (≥ +10 %);
3. integrated memory usage - share of proposals citing past episodes (rising);
4. value coherence - Pearson r between different citizens' weight changes after the
   same episodes (r > 0.6);
5. novel consensus - share of compromises that found a "third way" (≥ 20 %);
6. metacognitive depth - mean rung of meta-reference per week (`metacognition`; rising).
"""

from __future__ import annotations

import json
import math
import secrets
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any

from shared.consensus import Consensus, Proposal, diversity, metacognition, rubric, view
from shared.consensus.rules import APPROVING
from shared.consensus.weighing import MAX_STEP

AUDIT_SHARE = 0.1  # of decided proposals, sampled for a person's gaming audit
MIN_PAIRS = 3  # fewer pairs of weight changes than this give no correlation worth a number


def report(commons: Consensus) -> dict[str, Any]:
    """Indicators over every decided proposal, plus weight diversity now."""
    everything = [commons.load(pid) for pid in commons.ids()]
    decided = [d for d in everything if d.result]
    n = len(decided)

    def share(pred: Any) -> float | None:
        return round(sum(1 for d in decided if pred(d)) / n, 3) if n else None

    rounds: dict[str, list[int]] = defaultdict(list)
    for d in decided:
        rounds[d.stakes].append(d.round)
    sigma = commons.weights.diversity(commons.citizens)
    scores = {d.id: rubric.score(d) for d in decided}
    scored = [s for s in scores.values() if s is not None]
    return {
        "proposals": len(everything), "decided": n,
        "approved": sum(1 for d in decided if d.result == "approved"),
        "rejected": sum(1 for d in decided if d.result == "rejected"),
        "escalated_to_human": sum(1 for d in decided if d.human is not None),
        # 1. Emergent solutions: the final actions differ from the first proposal's.
        "emergent_solutions_rate": share(
            lambda d: d.revisions and d.revisions[0].get("actions") != d.revisions[-1].get(
                "actions")),
        # 2./3 of failure modes: dissent - at least one concern, rejection or red flag.
        "dissent_rate": share(conflicted),
        # 2. Productive conflict: the rubric of conflicted against unanimous proposals.
        "productive_conflict": productive_conflict(decided, scores),
        # 3. Integrated memory usage, by week: proposals that cite past episodes.
        "memory_citation_rate": memory_citation(decided, commons.episodes.ids()),
        # 4. Value coherence: do citizens' weights move alike after the same episode?
        "value_coherence": value_coherence(commons.weights.history()),
        # 5. Novel consensus: compromises that found a third way.
        "novel_consensus": novel_consensus(decided),
        # 6. Metacognitive depth, by week, over every proposal's reasoning.
        "metacognitive_depth": metacognition.by_week(everything),
        # The Quality Rubric's means over executed proposals (the rest are unscored).
        "rubric_means": rubric.means(scored),
        "rubric_scored": len(scored), "rubric_unscored_never_executed": n - len(scored),
        "gaming_flag_rate": share(lambda d: bool(d.flags)),
        # Failure mode 6: the integrator's collusion check, and what it found.
        "collusion_checked": sum(1 for d in decided for i in d.integrations.values()
                                 if "collusion_check" in i),
        "collusion_detected": sum(1 for d in decided for i in d.integrations.values()
                                  if (i.get("collusion_check") or {}).get("detected")),
        "cost_per_proposal": cost_per_proposal(decided),
        # Failure mode 5: weight space diversity (seed target σ > 0.15 per value).
        "weight_diversity_sigma": sigma,
        "weight_diversity_mean_sigma": round(statistics.fmean(sigma.values()), 4)
        if sigma else None,
        # Failure mode 2: rounds per proposal by stakes (targets < 2 low, < 4 medium).
        "rounds_per_proposal_by_stakes": {s: round(statistics.fmean(r), 2)
                                          for s, r in sorted(rounds.items())},
        "weight_changes": len(commons.weights.history()),
        "episodes": len(commons.episodes.all()),
        # The seed's other mitigations, as they were applied (Failure Modes §3, §6).
        "red_team_reviews": sum(1 for d in everything if d.red_team and d.verifications),
        "sent_back_for_gaming_flags": sum(1 for d in everything if d.blocked),
        "diversity_perturbations": sum(1 for line in commons.weights.history()
                                       if line.get("approved_by") == diversity.AUTHOR),
        "audit_sample": audit_sample([d.id for d in decided]),
    }


def memory_citation(decided: Iterable[Proposal], episodes: set[str]) -> dict[str, Any]:
    """Indicator 3, the seed's "10 % week 1 → 50 % month 3": per ISO week of a proposal's
    first revision, the share of decided proposals citing at least one episode that
    exists (an id nobody recorded, or the proposal's own episode, cites no memory), the
    share over all weeks, and the trend of the weekly shares."""
    weeks: dict[str, list[bool]] = defaultdict(list)
    for d in decided:
        if not d.revisions or not d.revisions[0].get("ts"):
            continue
        known = episodes - {"ep-" + d.id.removeprefix("prop-")}
        weeks[metacognition.week(str(d.revisions[0]["ts"]))].append(any(
            str(c) in known for r in d.revisions for c in r.get("cites") or []))
    table = {w: {"proposals": len(v), "citing": sum(v), "rate": round(sum(v) / len(v), 3)}
             for w, v in sorted(weeks.items())}
    every = [x for v in weeks.values() for x in v]
    return {"by_week": table, "rate": round(sum(every) / len(every), 3) if every else None,
            "trend_per_week": metacognition.trend({w: r["rate"] for w, r in table.items()}),
            "target": "rising (0.10 week 1 → 0.50 month 3)"}


def cost_per_proposal(decided: Iterable[Proposal]) -> dict[str, Any]:
    """Failure mode 4's metric: what decided proposals cost, by stakes (the seed's
    targets: < $0.10 a simple task, < $0.50 a complex one)."""
    by: dict[str, list[float]] = defaultdict(list)
    for d in decided:
        by[d.stakes].append(view.cost(d)["total_usd"])
    every = [x for v in by.values() for x in v]
    return {"mean_usd": round(statistics.fmean(every), 4) if every else None,
            "max_usd": max(every) if every else None,
            "mean_usd_by_stakes": {s: round(statistics.fmean(v), 4) for s, v in sorted(by.items())},
            "target": "< $0.10 simple, < $0.50 complex"}


def audit_sample(decided: list[str]) -> list[str]:
    """The seed's random audits: a tenth of the decided proposals (at least one) for a
    person to review for gaming - drawn afresh by the operating system's randomness at
    each report, so no citizen can know beforehand which of its proposals is looked at."""
    if not decided:
        return []
    k = max(1, math.ceil(len(decided) * AUDIT_SHARE))
    return sorted(secrets.SystemRandom().sample(decided, k))


def conflicted(d: Proposal) -> bool:
    """Any dissent in any round: a concern, a rejection, an integrator decision other than
    approve, or a deterministic gaming flag."""
    return bool(d.flags) or any(v.get("concerns") or v["decision"] == "reject"
                                for v in d.verifications.values()) \
        or any(i["decision"] != "approve" for i in d.integrations.values())


def productive_conflict(decided: Iterable[Proposal],
                        scores: Mapping[str, Mapping[str, float] | None]) -> dict[str, Any]:
    """Indicator 2: mean overall rubric of conflicted proposals against proposals approved
    unanimously in round one without a concern, and the delta in % of the latter.

    Only executed proposals have a rubric (see `rubric`), so a conflict that stopped a
    bad proposal is not counted in its favour here: the measure compares outcomes that
    happened, as the seed's rubric does. Proposals neither conflicted nor first-round
    unanimous (none, under today's rules) are in neither group."""
    groups: dict[str, list[float]] = {"conflicted": [], "unanimous": []}
    for d in decided:
        s = scores.get(d.id)
        if s is None:
            continue
        if conflicted(d):
            groups["conflicted"].append(s["overall"])
        elif d.round == 1:
            groups["unanimous"].append(s["overall"])
    mean = {k: round(statistics.fmean(v), 3) if v else None for k, v in groups.items()}
    c, u = mean["conflicted"], mean["unanimous"]
    return {"conflicted_mean": c, "unanimous_mean": u,
            "conflicted": len(groups["conflicted"]), "unanimous": len(groups["unanimous"]),
            "delta_pct": round((c - u) / u * 100, 1) if c is not None and u else None,
            "target": "delta ≥ +10 %"}


def value_coherence(history: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Indicator 4: Pearson r between different citizens' weight changes after the same
    episode, for the same value.

    Each line of weight_history.jsonl names the citizen, the value, the delta and, first
    among its episodes, the episode that occasioned it. A citizen's deltas for one value
    after one episode are summed; every two citizens who both moved that value after that
    episode make a pair, taken both ways round so the order of names cannot matter. Only
    citizens whose weight actually moved count: the integrator never adjusts its own
    weights, and an absent adjustment is the absence of a decision, not a zero. Lines the
    weights themselves ignore (a delta that is no number, or over MAX_STEP) are left out.
    r is None with fewer than MIN_PAIRS pairs, or when either side never varies."""
    moved: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for line in history:
        try:
            delta = float(line["delta"])
            episode = str(line["episodes"][0])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if abs(delta) <= MAX_STEP + 1e-9:
            moved[(episode, str(line.get("value")))][str(line.get("citizen"))] += delta
    xs: list[float] = []
    ys: list[float] = []
    pairs = 0
    for deltas in moved.values():
        for a, b in combinations(sorted(deltas), 2):
            pairs += 1
            xs += [deltas[a], deltas[b]]
            ys += [deltas[b], deltas[a]]
    r = None
    if pairs >= MIN_PAIRS:
        try:
            r = round(statistics.correlation(xs, ys), 3)
        except statistics.StatisticsError:  # a constant side: correlation is undefined
            r = None
    return {"r": r, "pairs": pairs, "episodes": len({e for e, _ in moved}),
            "target": "r > 0.6"}


def action_keys(rev: Mapping[str, Any]) -> set[str]:
    """What a revision's actions do, as (tool, path or command): the text written is left
    out, so rewording a file is the same step and writing another file is a new one."""
    return {json.dumps([a.get("tool"), rubric.touched(a)]) for a in rev.get("actions") or []
            if isinstance(a, Mapping)}


def is_compromise(d: Proposal) -> bool:
    """A proposal the discussion changed: it reached the compromise level, or a later
    revision answered the reviewers' concerns."""
    return any(r.get("level") == "compromise" for r in d.revisions) or any(
        str(r.get("response_to_concerns", "")).strip() for r in d.revisions[1:])


def third_way(d: Proposal) -> bool:
    """A compromise that is not an average of positions already on the table:

    - its final revision does something no earlier revision did (an action on a path or
      a command no earlier revision had; rewording the same file is adjusting, not new);
    - both reviewers had objected before it (the verifier with a concern or rejection,
      the integrator with a decision other than approve), so there were two sets of
      concerns to synthesise;
    - both accepted it (the verifier approving, the integrator approve): it answered them.
    """
    if d.round < 2 or d.round not in d.integrations or d.round not in d.verifications:
        return False
    earlier = set().union(*(action_keys(r) for r in d.revisions[:-1]))
    new = action_keys(d.revisions[-1]) - earlier
    before = range(1, d.round)
    verifier_objected = any(d.verifications[r].get("concerns")
                            or d.verifications[r]["decision"] not in APPROVING
                            for r in before if r in d.verifications)
    integrator_objected = any(d.integrations[r]["decision"] != "approve"
                              for r in before if r in d.integrations)
    accepted = d.verifications[d.round]["decision"] in APPROVING \
        and d.integrations[d.round]["decision"] == "approve"
    return bool(new) and verifier_objected and integrator_objected and accepted


def novel_consensus(decided: Iterable[Proposal]) -> dict[str, Any]:
    """Indicator 5: the share of compromises that are a third way (`third_way`)."""
    compromises = [d for d in decided if is_compromise(d)]
    novel = sum(1 for d in compromises if third_way(d))
    return {"compromises": len(compromises), "third_way": novel,
            "rate": round(novel / len(compromises), 3) if compromises else None,
            "target": "rate ≥ 0.20"}
