"""The seed's emergence indicators, computed from consensus history after the fact.

Observed, never fed back: nothing here is shown to a citizen or read by a prompt
("we measure these AFTER the fact … agents don't optimize for these metrics").
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from shared.consensus import Consensus, Proposal


def report(commons: Consensus) -> dict[str, Any]:
    """Indicators over every decided proposal, plus weight diversity now."""
    decided: list[Proposal] = []
    for pid in commons.ids():
        d = commons.load(pid)
        if d.result:
            decided.append(d)
    n = len(decided)

    def share(pred: Any) -> float | None:
        return round(sum(1 for d in decided if pred(d)) / n, 3) if n else None

    rounds: dict[str, list[int]] = defaultdict(list)
    for d in decided:
        rounds[d.stakes].append(d.round)
    sigma = commons.weights.diversity(commons.citizens)
    return {
        "proposals": len(commons.ids()), "decided": n,
        "approved": sum(1 for d in decided if d.result == "approved"),
        "rejected": sum(1 for d in decided if d.result == "rejected"),
        "escalated_to_human": sum(1 for d in decided if d.human is not None),
        # 1. Emergent solutions: the final actions differ from the first proposal's.
        "emergent_solutions_rate": share(
            lambda d: d.revisions and d.revisions[0].get("actions") != d.revisions[-1].get(
                "actions")),
        # 2./3 of failure modes: dissent - at least one concern, rejection or red flag.
        "dissent_rate": share(lambda d: d.flags or any(
            v.get("concerns") or v["decision"] == "reject" for v in d.verifications.values())
            or any(i["decision"] != "approve" for i in d.integrations.values())),
        # 3. Integrated memory usage: proposals that cite past episodes.
        "memory_citation_rate": share(lambda d: any(r.get("cites") for r in d.revisions)),
        "gaming_flag_rate": share(lambda d: bool(d.flags)),
        # Failure mode 5: weight space diversity (seed target σ > 0.15 per value).
        "weight_diversity_sigma": sigma,
        "weight_diversity_mean_sigma": round(statistics.fmean(sigma.values()), 4)
        if sigma else None,
        # Failure mode 2: rounds per proposal by stakes (targets < 2 low, < 4 medium).
        "rounds_per_proposal_by_stakes": {s: round(statistics.fmean(r), 2)
                                          for s, r in sorted(rounds.items())},
        "weight_changes": len(commons.weights.history()),
        "episodes": len(commons.episodes.all()),
    }
