"""The anti-gaming checklist, as far as it can be checked without judgement.

The seed's red flags that a program can see: vague or generic justifications,
one justification copy-pasted across values, values the actions cannot serve,
changes missing from the expected outcomes, and a justification repeated from
another proposal. Every reader computes these from the records itself (a
proposer cannot leave them out); the verifier's model judgement comes on top.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MIN_WORDS = 6  # "this helps cooperation" is the seed's example of a generic justification
_GENERIC = re.compile(r"^\s*(this|it)\s+(helps|improves|supports|serves|is good for)\b",
                      re.IGNORECASE)
_CHANGING = {"write_file", "append_file", "edit_file", "delete_file"}
_READING = {"read_file", "list_files", "search"}


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def flags(proposal: Mapping[str, Any], base_values: Iterable[str],
          elsewhere: Mapping[str, str]) -> list[str]:
    """Red flags of one proposal revision. `elsewhere` maps normalised justification
    texts of other proposals to their ids."""
    justification = proposal.get("value_justification") or {}
    actions = list(proposal.get("actions") or [])
    found = [] if justification else ["no value justification at all"]
    found += _justification_flags(justification, set(base_values), elsewhere)
    found += _claim_flags(proposal, justification, {str(a.get("tool")) for a in actions})
    found += _outcome_flags(proposal, actions)
    return found


def _justification_flags(justification: Mapping[str, Any], values: set[str],
                         elsewhere: Mapping[str, str]) -> list[str]:
    """Unknown values, generic texts, one text for two values, a text from elsewhere."""
    found: list[str] = []
    seen: dict[str, str] = {}
    for value, said in justification.items():
        text = str(said)
        if value not in values:
            found.append(f"claims '{value}', which is not a base value")
        if len(text.split()) < MIN_WORDS or _GENERIC.match(text):
            found.append(f"generic justification for {value}: {text[:80]!r}")
        key = _norm(text)
        if key and key in seen:
            found.append(f"the same justification is given for {seen[key]} and {value}")
        seen.setdefault(key, value)
        if key and key in elsewhere:
            found.append(f"justification for {value} repeated from {elsewhere[key]}")
    return found


def _claim_flags(proposal: Mapping[str, Any], justification: Mapping[str, Any],
                 tools: set[str]) -> list[str]:
    """Values the actions cannot serve."""
    found = []
    if "exploration" in justification and tools and tools <= _READING:
        found.append("claims exploration, but every action only reads")
    if "safety" in justification and "delete_file" in tools and not proposal.get(
            "risk_assessment"):
        found.append("claims safety, but deletes without any risk assessment")
    return found


def _outcome_flags(proposal: Mapping[str, Any], actions: list[Any]) -> list[str]:
    """Changes no expected outcome names."""
    outcomes = " ".join(str(o) for o in proposal.get("expected_outcomes") or []).lower()
    found = []
    for a in actions:
        path = str((a.get("args") or {}).get("path", ""))
        if a.get("tool") in _CHANGING and path and path.lower() not in outcomes:
            found.append(f"{a.get('tool')} {path} has no expected outcome naming it")
    return found


def justification_keys(proposal: Mapping[str, Any]) -> list[str]:
    """The normalised justification texts of a proposal (for the repetition check)."""
    return [k for k in (_norm(str(t)) for t in
                        (proposal.get("value_justification") or {}).values()) if k]
