"""What a Thought World step's record keeps of its author's answer: the vote, its
rationale and values, the step's own cost, the integrator's collusion check - the
checks that make a model's answer a record (`shared.consensus.store`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.consensus.calls import CALLS, step_calls
from shared.consensus.view import COST, step_cost
from shared.errors import Invalid


def clean(data: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: data[k] for k in keys if k in data}


def vote(data: Mapping[str, Any], who: str, decisions: tuple[str, ...],
          keys: tuple[str, ...]) -> dict[str, Any]:
    """A vote's record: its decision (one of `decisions`), rationale, values and `keys`."""
    if data.get("decision") not in decisions:
        raise Invalid(f"{who} decides one of {', '.join(decisions)}")
    return {**clean(data, ("decision", "rationale", *keys, "values")), **costed(data)}


def costed(data: Mapping[str, Any]) -> dict[str, Any]:
    """The step's own cost and calls, when its wake measured them (`view.cost`, `calls`)."""
    out = {COST: step_cost(data)} if COST in data else {}
    return {**out, CALLS: step_calls(data)} if CALLS in data else out


def collusion(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The integrator's answer to "are the executor and the verifier colluding?" (None:
    not asked - a step taken without the prompt, e.g. by hand or before this existed).

    :raises Invalid: an answer that is not {detected: true|false, explanation}.
    """
    check = data.get("collusion_check")
    if check is None:
        return None
    if not isinstance(check, Mapping) or not isinstance(check.get("detected"), bool):
        raise Invalid("an integrator's collusion_check is {\"detected\": true|false, "
                      "\"explanation\": \"...\"} - say whether the executor and the verifier "
                      "could be coordinating to game the review, and why")
    return {"detected": check["detected"],
            "explanation": str(check.get("explanation", ""))[:400]}
