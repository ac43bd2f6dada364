"""The OpenAI chat wire format's native tool calling, for servers that have it.

llama.cpp's server (with `--jinja`), Ollama and vLLM accept OpenAI-style `tools` and
answer with `message.tool_calls` whose arguments are whatever the model wrote - no
grammar bound on any string, so a long command or file arrives whole. A call that ran
into the output limit (`finish_reason: "length"`) is refused with an observation, never
run: its arguments were cut.

Our conversation is Anthropic-shaped (content blocks `tool_use` / `tool_result`); here
it becomes OpenAI's (`assistant.tool_calls`, `role: "tool"` messages) and back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from citizen.llm.base import Request, ToolCall, ToolSpec
from citizen.llm.structured import clamp_numbers, schema_problem


def tools_param(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [{"type": "function",
             "function": {"name": t.name, "description": t.description,
                          "parameters": dict(t.input_schema)}} for t in tools]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content
                     if isinstance(b, dict) and b.get("type") == "text")


def messages(request: Request) -> list[dict[str, Any]]:
    """Anthropic-shaped system blocks and messages → OpenAI chat messages."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": "\n\n".join(request.system)})
    for message in request.messages:
        content = message["content"]
        if isinstance(content, str):
            out.append({"role": message["role"], "content": content})
            continue
        if message["role"] == "assistant":
            calls = [{"id": b["id"], "type": "function",
                      "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
                     for b in content if b.get("type") == "tool_use"]
            turn: dict[str, Any] = {"role": "assistant", "content": _text(content) or None}
            if calls:
                turn["tool_calls"] = calls
            out.append(turn)
            continue
        for block in content:  # a user turn: tool results first, then any text
            if block.get("type") == "tool_result":
                out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": _text(block.get("content", ""))})
        text = _text(content)
        if text:
            out.append({"role": "user", "content": text})
    return out


def calls(message: dict[str, Any], tools: Sequence[ToolSpec], finish_reason: str,
          max_tokens: int) -> tuple[ToolCall, ...]:
    """The tool calls of an answer, each with the reason it must not run (if any)."""
    specs = {t.name: t for t in tools}
    out = []
    for n, raw in enumerate(message.get("tool_calls") or ()):
        fn = raw.get("function") or {}
        name = str(fn.get("name", ""))
        problem = ""
        try:
            args = fn.get("arguments") or {}
            args = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError as exc:
            args, problem = {}, f"your arguments are not valid JSON ({exc.msg})"
        if not isinstance(args, dict):
            args, problem = {}, problem or "your arguments must be a JSON object"
        spec = specs.get(name)
        if spec is None:
            problem = f"unknown tool '{name}'"
        elif not problem:
            args = clamp_numbers(spec.input_schema, args)
            problem = schema_problem(spec.input_schema, args)
        if finish_reason == "length":
            problem = (f"your call was cut at the output limit ({max_tokens} tokens), so it "
                       "was not run; shorten it, or write long content in parts (write_file "
                       "the first part, then append_file the rest)")
        out.append(ToolCall(id=str(raw.get("id") or f"call-{n}"), name=name, input=args,
                            problem=problem))
    return tuple(out)
