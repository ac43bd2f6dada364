"""A wake's transcript as text: one readable line per event of its log (a few for a model's
reply). `citizen logs --wake N`, its live tail and the web dashboard's wake page print the
same lines, so they show the same facts. Pure: events in, text out (no file, no terminal).
"""

from __future__ import annotations

import json
from typing import Any

_MORE = "\n           "  # a continuation line under an event


def _model(e: dict[str, Any], ts: str) -> str:
    """A model call: the model that answered (and the route's, if another), then what it
    said or asked for - or what the deliverables and the verification came to."""
    if "error" in e:
        return f"{ts}   model [{e.get('purpose')}] output rejected: {e['error']}"
    reply = e.get("reply") or {}
    routed = f" (route: {e['route_model']})" if e.get("route_model") else ""
    head = (f"{ts}   model [{e.get('purpose')}] {e.get('model')}{routed}: {e.get('tokens_in')} "
            f"in, {e.get('tokens_out')} out, ${e.get('cost_usd', 0):.4f}, {e.get('latency_s')} s")
    data = reply.get("data")
    if e.get("purpose") == "task_deliverables" and isinstance(data, dict):
        return f"{head}{_MORE}read from the task: {_deliverables(data)}"
    if e.get("purpose") == "verify_task" and isinstance(data, dict):
        return f"{head}{_MORE}verification: {data.get('verdict')} - {data.get('reason', '')}"
    calls = ", ".join(f"{c.get('name')}({json.dumps(c.get('input'))[:80]})"
                      for c in reply.get("tool_calls") or [])
    said = (reply.get("text") or "").strip().replace("\n", " ")[:160]
    return (head + (f"{_MORE}says: {said}" if said else "")
            + (f"{_MORE}calls: {calls}" if calls else ""))


def _deliverables(data: dict[str, Any]) -> str:
    files = ", ".join(map(str, data.get("files") or [])) or "none"
    cmds = ", ".join(str(c.get("run", c) if isinstance(c, dict) else c)
                     for c in data.get("commands") or []) or "none"
    return (f"files {files}; commands {cmds}; an answer "
            f"{'asked' if data.get('answer') else 'not asked'}")


def _task(e: dict[str, Any], ts: str) -> str:
    """A task's transition; when claimed, the deliverables fixed for it (what "done" is
    checked against); when done, the summary with its evidence and verifier's verdict."""
    head = f"task {e.get('id')} {e.get('transition')}"
    summary = str(e.get("summary") or "").strip().removeprefix(head).removeprefix(":").strip()
    wanted = e.get("deliverables")
    return (f"{ts} {head}" + (f": {summary}".replace("\n", _MORE) if summary else "")
            + (f"{_MORE}deliverables recorded: {_deliverables(wanted)}"
               if isinstance(wanted, dict) else ""))


def line(e: dict[str, Any]) -> str:  # noqa: PLR0911 - one readable line per event kind
    ev, ts = e.get("event", "?"), str(e.get("ts", ""))[11:19]
    if ev == "wake_start":
        return (f"{ts} wake {e.get('wake')} {e.get('type')} started ({e.get('reason')}), "
                f"pid {e.get('pid')}")
    if ev == "gate":
        return f"{ts} gate: {e.get('verdict')} - {e.get('reason')}"
    if ev == "llm_call":
        return _model(e, ts)
    if ev == "route":
        return (f"{ts} route: tier {e.get('tier')} ({e.get('method')}), its seat's model "
                f"{e.get('route_model', e.get('model'))}")
    if ev == "tool_call":
        flag = " (cached)" if e.get("cached") else (" ERROR" if e.get("error") else "")
        result = str(e.get("result", "")).replace("\n", " ")[:140]
        return (f"{ts}   tool {e.get('tool')}{flag} {json.dumps(e.get('args'))[:100]}"
                f"{_MORE}-> {result}")
    if ev == "task":
        return _task(e, ts)
    if ev == "error":
        return f"{ts} ERROR {e.get('error')}\n{e.get('traceback', '')}"
    if ev == "wake_end":
        why = str(e.get("reason") or "").replace("\n", _MORE)
        return (f"{ts} wake ended: {e.get('status')}{' - ' + why if why else ''} "
                f"(${e.get('cost_usd', 0):.4f}, {e.get('calls', 0)} calls, "
                f"{e.get('duration_s', 0)} s)")
    if ev == "prompt":
        return ""
    rest = {k: v for k, v in e.items() if k not in ("ts", "wake", "event")}
    return f"{ts} {ev}: {json.dumps(rest)[:200]}"
