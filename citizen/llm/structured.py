"""Structured output: bounding schemas, parsing and validating model JSON, retrying.

Everything machine-readable a model produces (votes, picks, moves, bids) goes
through here: schema-validated, never parsed with regular expressions. A reply
that breaks its schema is handed back to the model as an observation and retried
within a bounded number of attempts - never a crash.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import jsonschema

from citizen.errors import StructuredOutputError
from citizen.llm.base import Provider, Reply, Request

# Defaults that keep a small model's constrained decoding from running away:
# every string and every list in a structured call has an upper bound.
DEFAULT_MAX_STRING = 400
DEFAULT_MAX_ITEMS = 12
# llama.cpp turns maxLength N into N nested optional rules; past ~1,000 its grammar
# parser rejects the grammar ("exceeds sane defaults") and then crashes the process
# with SIGSEGV (measured with llama-cpp-python 0.3.36). So every bound is clamped.
GRAMMAR_MAX_STRING = 1000


def bound_schema(
    schema: Mapping[str, Any],
    max_string: int = DEFAULT_MAX_STRING,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> dict[str, Any]:
    """A copy of `schema` where every string has `maxLength` and every array `maxItems`.

    Existing string bounds are kept but clamped to `GRAMMAR_MAX_STRING`.
    """
    out = copy.deepcopy(dict(schema))

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            kind = node.get("type")
            kinds = kind if isinstance(kind, list) else [kind]
            if "string" in kinds and "enum" not in node and "const" not in node:
                node["maxLength"] = min(node.get("maxLength", max_string), GRAMMAR_MAX_STRING)
            if "array" in kinds:
                node.setdefault("maxItems", max_items)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


def schema_problem(schema: Mapping[str, Any], data: Any) -> str:
    """'' when `data` matches `schema`, otherwise the first problem, naming where."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if not errors:
        return ""
    err = errors[0]
    where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
    return f"at {where}: {err.message}"


def parse_json(text: str, schema: Mapping[str, Any]) -> Any:
    """Parse model text as JSON matching `schema`.

    :raises StructuredOutputError: not JSON, or not matching the schema.
    """
    try:
        # strict=False: small models emit raw newlines and tabs inside strings.
        data = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        raise StructuredOutputError(f"not valid JSON ({exc.msg} at char {exc.pos})", text) from exc
    problem = schema_problem(schema, data)
    if problem:
        raise StructuredOutputError(problem, text)
    return data


def complete_structured(provider: Provider, request: Request, attempts: int = 2) -> Reply:
    """Ask for structured output; on a schema failure, show the model its error and retry.

    :raises StructuredOutputError: every attempt failed (the last failure is raised).
    """
    if request.output_schema is None:
        raise ValueError("complete_structured needs a request with an output_schema")
    messages = list(request.messages)
    last = StructuredOutputError("no attempt was made", "")
    for _ in range(max(1, attempts)):
        try:
            return provider.complete(replace(request, messages=messages))
        except StructuredOutputError as exc:
            last = exc
            messages = [
                *messages,
                {"role": "assistant", "content": exc.raw[:2000] or "(empty)"},
                {"role": "user", "content": f"That answer was rejected: {exc.problem}. "
                 "Answer again with JSON that matches the schema exactly."},
            ]
    raise last
