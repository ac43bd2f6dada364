"""What a debate yields: the crux (ThreadCrux) and the transcript.

Pure functions over a replayed debate (`state.State`): no files. The store
writes their results as `crux.json` and `transcript.md` once a debate has converged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from shared.debates.moves import falsifier_problems
from shared.debates.state import State


def _position(d: State, p: str) -> dict[str, Any]:
    """Where participant `p` ended, and whether its position or TopClaim moved."""
    c = d.commitments.get(p, {})
    first = d.first_commitments.get(p, {})
    claim, first_claim = d.top_claims.get(p), d.first_top_claims.get(p)
    claim_changed = bool(claim and first_claim and (
        claim.get("side"), claim.get("statement")) != (first_claim.get("side"),
                                                     first_claim.get("statement")))
    return {"side": c.get("side", "NONE"), "confidence": c.get("confidence"),
            "top_claim": claim, "position_changed": bool(first) and first.get("side") != c.get(
                "side"), "top_claim_changed": claim_changed}


def _counterfactual(d: State, p: str) -> dict[str, Any]:
    """Would `p`'s TopClaim flip if the crux resolved the other way: `p`'s own answer,
    asked and recorded when the crux locked (never inferred from its sides)."""
    answer = d.counterfactual.get(p)
    if answer is None:
        why = ("no YES/NO commitment when the crux locked" if d.counterfactual
               else "not asked: the crux never locked")
        return {"top_claim_would_flip": False, "answered": False, "why": why}
    return {"top_claim_would_flip": answer["answer"], "answered": True,
            "top_claim": answer["top_claim"], "answered_at": answer["seq"],
            "why": f"{p} answered {'yes' if answer['answer'] else 'no'} at crux lock"}


def crux(d: State) -> dict[str, Any]:
    """The ThreadCrux: question, positions, falsifiers, counterfactual TopClaim linkage,
    resolution criteria, and whether it validates (failed checks listed)."""
    positions = {p: _position(d, p) for p in d.participants}
    counterfactual = {p: _counterfactual(d, p) for p in d.participants}
    cheap = [p for p, v in positions.items() if v["position_changed"]
             and not v["top_claim_changed"]]
    falsifiers = [{"by": p, **f, "evidence": d.evidence_on.get(f["id"], [])}
                  for p, fs in d.falsifiers.items() for f in fs]
    criteria = [f"{f['metric']} {f['threshold']} by {f['deadline']} ({f['by']})"
                for f in falsifiers if not falsifier_problems(f)]
    failed = _failed_checks(d, positions, counterfactual, falsifiers, criteria)
    return {"id": d.id, "question": d.question, "positions": positions,
            "falsifiers": falsifiers, "counterfactual": counterfactual,
            "resolution_criteria": criteria, "cheap_concessions": cheap,
            "validated": not failed, "failed_checks": failed}


def _failed_checks(d: State, positions: Mapping[str, Mapping[str, Any]],
                   counterfactual: Mapping[str, Mapping[str, Any]],
                   falsifiers: list[dict[str, Any]], criteria: list[str]) -> list[str]:
    failed = []
    if not {"YES", "NO"} <= {v["side"] for v in positions.values()}:
        failed.append("no real disagreement: needs both YES and NO")
    vague = [f["id"] for f in falsifiers if falsifier_problems(f)]
    if not falsifiers or vague:
        failed.append(f"falsifiers not concrete: {', '.join(vague) or 'none given'}")
    if sum(1 for v in counterfactual.values() if v["top_claim_would_flip"]) < 2:
        failed.append("not decision-relevant: fewer than 2 participants answered that "
                      "their TopClaim would flip")
    if not criteria:
        failed.append("no resolution criteria")
    if d.stage != "CONVERGED":
        failed.append(f"the debate did not converge ({d.stage.lower()}: {d.ended})")
    return failed


def transcript(d: State) -> str:
    """The debate as Markdown: one section per stage, one line per message."""
    lines = [f"# Debate {d.id}: {d.topic}", "",
             f"Participants: {', '.join(d.participants)}  ", f"Stage: {d.stage}  ",
             f"Question: {d.question or '(none yet)'}", ""]
    stage = ""
    for m in d.messages:
        if m["stage"] != stage:
            stage = m["stage"]
            lines += ["", f"## {stage}", ""]
        extra = "".join(f" {k}={json.dumps(m[k], ensure_ascii=False)}" for k in
                        ("target", "side", "grade", "question", "falsifier") if k in m)
        lines.append(f"- **{m['author']}** `{m['move']}`{extra}: {m.get('content', '')}")
    return "\n".join(lines) + "\n"
