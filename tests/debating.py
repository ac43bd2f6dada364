"""A scripted debater for tests: a legal, deterministic move for any situation (it
decides nothing a test asserts about a model; it only drives the mechanics)."""

from __future__ import annotations

import json
import re
from typing import Any

SIDE = {"opus": "YES"}  # everyone else says NO: a real disagreement
FALSIFIER = {"metric": "Share of merged changes reverted within a week", "threshold": "< 5%",
             "deadline": "2027-06-30", "reasoning": "reverts are what tests should prevent"}


def play(s: dict[str, Any]) -> dict[str, Any]:  # noqa: PLR0911 - one branch per situation
    me, stage = s["you"], s["stage"]
    side = SIDE.get(me, "NO")
    pending = s.get("steelman_of_you_to_grade")
    if pending:
        # the intervention path: opus's first steelman of anyone is INCOMPLETE
        grade = "INCOMPLETE" if pending["by"] == "opus" and pending["attempt"] == 1 \
            else "ACCURATE"
        return {"move": "GRADE_STEELMAN", "grade": grade, "content": f"{grade.lower()}"}
    if stage == "DISCOVERY":
        if not s["your_top_claim"]:
            return {"move": "TOP_CLAIM", "content": "what I am really arguing",
                    "top_claim": {"statement": "Tests first makes citizens' code safer",
                                  "side": side, "confidence": 0.7}}
        if not s["question"]:
            return {"move": "PROPOSE_QUESTION", "content": "a binary question",
                    "question": "Will writing tests first cut reverts below 5% by 2027?"}
        return {"move": "CLAIM", "content": f"{me}: reverts cost more than tests"}
    if stage == "CRUX_LOCK":
        if not s["your_commitment"]:
            return {"move": "COMMIT", "side": side, "confidence": 0.7, "falsifier": FALSIFIER,
                    "top_claim_would_flip": bool(s["your_top_claim"]),
                    "content": f"{me} commits {side}"}
        others = [p for p, sd in s["commitments"].items() if sd != side and p != me]
        targets = [t for t in s["steelman_first"] if t in others]
        if targets and "STEELMAN" in s["allowed_moves"]:
            return {"move": "STEELMAN", "target": targets[0],
                    "content": f"{targets[0]} holds the opposite view because of cost"}
        return {"move": "PROPOSE_LOCK", "content": "ready to lock"}
    if s["you_may_challenge"] and not any(m["author"] == me and m["move"] == "CHALLENGE"
                                          for m in s["recent_messages"]):
        return {"move": "CHALLENGE", "target": s["you_may_challenge"][0],
                "content": "your numbers ignore flaky tests"}
    named = [f.split(":", 1)[0] for fs in s.get("falsifiers", {}).values() for f in fs]
    return {"move": "EVIDENCE", "content": "last quarter 7% of merges were reverted",
            "bears_on": named[0] if named else ""}


def scripted_debater(body: dict[str, Any]) -> dict[str, Any] | None:
    """The fake Messages API's answer to a DEBATE move: read the situation JSON from the
    prompt and play it."""
    from tests.anthropic_server import tool_use

    if (body.get("tool_choice") or {}).get("name") != "respond":
        return None
    props = body["tools"][-1]["input_schema"]["properties"]
    if "grade" not in props:
        return None
    prompt = body["messages"][-1]["content"]
    text = prompt if isinstance(prompt, str) else prompt[0]["text"]
    found = re.search(r"The situation \(JSON\):\n(\{.*?\n\})\n", text, re.DOTALL)
    assert found, "the debater prompt carries the situation"
    return tool_use("respond", play(json.loads(found.group(1))))
