"""bench/month.py's model: a terse, competent model behind the Messages API test server
(writes the file its task names, reads it back and completes; answers each structured
step with a valid instance of its schema), and the simulated clock's wait. Shared with
bench/month_many.py."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bench.month_report import MONDAY, RUNAWAY
from citizen.llm.base import Reply, Request, ToolCall, Usage

RUNAWAY_DAYS = 7  # rex's model is runaway for a week, then behaves again
PATH = re.compile(r"notes/[\w.-]+\.md")
REVIEW_ITEM = re.compile(r"^- change (\S+) .* - (.*)$", re.MULTILINE)  # a REVIEW prompt's


def instance(schema: Mapping[str, Any]) -> Any:
    """A valid, terse instance of a JSON schema (the subset the prompts' schemas use)."""
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return instance(schema[key][0])
    if "const" in schema or "enum" in schema:
        return schema.get("const", (schema.get("enum") or [None])[0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object":
        props = schema.get("properties", {})
        wanted = schema.get("required", list(props))
        return {k: instance(v) for k, v in props.items() if k in wanted}
    if kind == "array":
        n = max(1, int(schema.get("minItems", 1)))
        return [instance(schema.get("items", {"type": "string"})) for _ in range(n)]
    return _scalar(kind, schema)


def _scalar(kind: str, schema: Mapping[str, Any]) -> Any:
    if kind == "string":
        text = "Agreed: keep it small, test it, and write down why."
        least, most = int(schema.get("minLength", 0)), int(schema.get("maxLength", 999))
        return (text * (least // len(text) + 1))[:max(least, min(len(text), most))]
    if kind in ("number", "integer"):
        lo, hi = schema.get("minimum", 0), schema.get("maximum")
        value = lo if hi is None else (lo + hi) / 2
        return int(value) if kind == "integer" else value
    return False  # boolean


def _reply(**kw: Any) -> Reply:
    return Reply(text=kw.pop("text", ""), model="month", provider="scripted",
                 usage=Usage(0, 0), **kw)


class Model:
    """A terse, competent model: writes the file its task names, reads it back and
    completes; answers each structured step with a valid instance of its schema. As a
    runaway (the week from world day `runaway_from`), it starts a debate at every
    execute call instead."""

    def __init__(self, runaway_from: int | None = None) -> None:
        self.runaway_from = runaway_from

    def runaway(self) -> bool:
        from shared import clock

        day = (clock.moment() - MONDAY).days
        return self.runaway_from is not None and 0 <= day - self.runaway_from < RUNAWAY_DAYS

    def complete(self, request: Request) -> Reply:
        if request.output_schema is not None:
            return _reply(data=self.structured(request.output_schema))
        return self.execute(request)

    def structured(self, schema: Mapping[str, Any]) -> Any:
        props = schema.get("properties", {})
        if "tier" in props:
            return {"tier": "fast"}
        if "verdict" in props:
            return {"verdict": "pass", "reason": "the file is there"}
        if "commands" in props:
            return {"files": [], "commands": [], "answer": False}
        if "tools" in props and "enum" in props["tools"].get("items", {}):
            want = {"debate_start"} if self.runaway() else {"write_file", "read_file"}
            want |= {"task_complete", "task_progress"}
            return {"tools": [t for t in props["tools"]["items"]["enum"] if t in want]}
        return instance(schema)

    def execute(self, request: Request) -> Reply:
        names = {t.name for t in request.tools}
        if self.runaway() and "debate_start" in names:
            return _reply(tool_calls=(ToolCall("c-debate", "debate_start", {
                "topic": "Should we debate more?", "participants": f"{RUNAWAY},opus"}),))
        first = request.messages[0]["content"] if request.messages else ""
        target = PATH.search(json.dumps(first))
        acted = sum(1 for m in request.messages if m["role"] == "user"
                    and isinstance(m["content"], list)
                    and any(b.get("type") == "tool_result" for b in m["content"]))
        prompt = first if isinstance(first, str) else " ".join(
            str(b.get("text", "")) for b in first if isinstance(b, dict))
        if prompt.startswith("This is a REVIEW wake"):
            return self.review(prompt, acted)
        if target is None or "write_file" not in names or acted > 2:
            return _reply(text="Nothing more needs doing now.")
        steps = (ToolCall("c-write", "write_file", {"path": target.group(),
                                                    "content": "# Notes\n\nDone as asked.\n"}),
                 ToolCall("c-read", "read_file", {"path": target.group()}),  # as a real one does
                 ToolCall("c-done", "task_complete", {"summary": f"wrote {target.group()}"}))
        return _reply(tool_calls=(steps[acted],))

    @staticmethod
    def review(prompt: str, acted: int) -> Reply:
        """What a REVIEW prompt asks, one item a call: adopt a verified change, else report."""
        steps = [ToolCall(f"c-review-{i}", "code_adopt", {"change_id": cid})
                 if "code_adopt" in ask else
                 ToolCall(f"c-review-{i}", "code_report_outcome", {
                     "change_id": cid, "outcome": "worked",
                     "note": "read the diff: one new note, nothing else touched"})
                 for i, (cid, ask) in enumerate(REVIEW_ITEM.findall(prompt))]
        if acted >= len(steps):
            return _reply(text="Every item has my answer.")
        return _reply(tool_calls=(steps[acted],))


def sleep_until(world: datetime) -> None:
    """Sleep until world time `world` (the simulated clock's wall seconds): a bench
    paces its stream by the clock, nothing to wait on but time."""
    from shared import clock

    left = clock.wall_seconds(world.timestamp() - clock.time())
    if left > 0:
        time.sleep(left)
