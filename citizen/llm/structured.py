"""Structured output: bounding schemas, parsing and validating model JSON, retrying.

Everything machine-readable a model produces (votes, picks, moves, bids) goes
through here: schema-validated, never parsed with regular expressions. A reply
that breaks its schema is handed back to the model as an observation and retried
within a bounded number of attempts - never a crash.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
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


def _each_schema_node(node: Any, visit: Callable[[dict[str, Any]], None]) -> None:
    """Call `visit` on every dict in a JSON schema, depth first."""
    if isinstance(node, dict):
        visit(node)
        for value in node.values():
            _each_schema_node(value, visit)
    elif isinstance(node, list):
        for value in node:
            _each_schema_node(value, visit)


def bound_schema(
    schema: Mapping[str, Any],
    max_string: int = DEFAULT_MAX_STRING,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> dict[str, Any]:
    """A copy of `schema` where every string has `maxLength` and every array `maxItems`.

    Existing string bounds are kept but clamped to `GRAMMAR_MAX_STRING`.
    """
    out = copy.deepcopy(dict(schema))

    def bound(node: dict[str, Any]) -> None:
        kind = node.get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        if "string" in kinds and "enum" not in node and "const" not in node:
            node["maxLength"] = min(node.get("maxLength", max_string), GRAMMAR_MAX_STRING)
        if "array" in kinds:
            node.setdefault("maxItems", max_items)

    _each_schema_node(out, bound)
    return out


# Worst-case characters of a JSON number under llama.cpp's number grammar (at most
# 16 integral digits, sign, point, decimals, exponent).
_NUMBER_CHARS = 24


def worst_case_chars(schema: Mapping[str, Any]) -> int:  # noqa: PLR0911 - a return per JSON type
    """The longest JSON text a bounded schema admits (1 space allowed at each separator).

    Under grammar-constrained decoding a string can cost one token per character, so
    this is also the worst-case number of output tokens.
    """
    if "const" in schema:
        return len(json.dumps(schema["const"]))
    if "enum" in schema:
        return max(len(json.dumps(v)) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return max(worst_case_chars(option) for option in schema[key])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return 2 + sum(len(json.dumps(k)) + 4 + worst_case_chars(v) for k, v in props.items())
    if kind == "array":
        item = worst_case_chars(schema.get("items", {"type": "string"}))
        return 2 + int(schema.get("maxItems", DEFAULT_MAX_ITEMS)) * (item + 2)
    if kind == "string":
        # Escapes (\n, \") can double a character; count them as two.
        return 2 + 2 * int(schema.get("maxLength", DEFAULT_MAX_STRING))
    if kind in ("number", "integer"):
        return _NUMBER_CHARS
    if kind == "boolean":
        return 5
    return 4  # null


def fit_schema(schema: Mapping[str, Any], max_tokens: int) -> dict[str, Any]:
    """Bound `schema` and shrink its string bounds until its worst case fits `max_tokens`.

    Then decoding under the grammar always closes its JSON before the token cap.

    :raises ValueError: not even one character per string fits (raise max_tokens).
    """
    bounded = bound_schema(schema)
    scale = 1.0
    while worst_case_chars(bounded) > max_tokens:
        scale *= 0.8
        bounded = _scaled(bound_schema(schema), scale)
        if scale < 0.001:
            raise ValueError(f"the schema cannot fit in {max_tokens} output tokens even with "
                             "1-character strings - raise max_tokens or simplify the schema")
    return bounded


def minimum_tokens(schema: Mapping[str, Any]) -> int:
    """The smallest token cap under which `schema` can still be decoded completely."""
    return worst_case_chars(_scaled(bound_schema(schema), 0.0001))


def _scaled(schema: dict[str, Any], scale: float) -> dict[str, Any]:
    def shrink(node: dict[str, Any]) -> None:
        if "maxLength" in node:
            node["maxLength"] = max(1, int(node["maxLength"] * scale))
        if "maxItems" in node and scale < 0.25:
            node["maxItems"] = max(node.get("minItems", 0), 1, int(node["maxItems"] * scale * 4))

    _each_schema_node(schema, shrink)
    return schema


def clamp_numbers(schema: Mapping[str, Any], data: Any) -> Any:
    """Clamp numbers into their schema's minimum/maximum.

    llama.cpp's grammar cannot express numeric bounds, so a constrained decode may
    yield confidence 1155079951 where the schema says at most 1. Clamping applies the
    bound the grammar could not; everything else is still validated, not repaired.
    """
    if isinstance(data, bool):
        return data
    if isinstance(data, int | float) and schema.get("type") in ("number", "integer"):
        low = schema.get("minimum", data)
        high = schema.get("maximum", data)
        return min(max(data, low), high)
    if isinstance(data, dict) and schema.get("type") == "object":
        props = schema.get("properties", {})
        return {k: clamp_numbers(props[k], v) if k in props else v for k, v in data.items()}
    if isinstance(data, list) and schema.get("type") == "array":
        return [clamp_numbers(schema.get("items", {}), v) for v in data]
    return data


def schema_problem(schema: Mapping[str, Any], data: Any) -> str:
    """'' when `data` matches `schema`, otherwise the first problem, naming where."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if not errors:
        return ""
    err = errors[0]
    where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
    return f"at {where}: {err.message}"


def parse_json(text: str, schema: Mapping[str, Any], clamp: bool = False) -> Any:
    """Parse model text as JSON matching `schema` (`clamp`: apply numeric bounds first).

    :raises StructuredOutputError: not JSON, or not matching the schema.
    """
    try:
        # strict=False: small models emit raw newlines and tabs inside strings.
        data = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        raise StructuredOutputError(f"not valid JSON ({exc.msg} at char {exc.pos})", text) from exc
    if clamp:
        data = clamp_numbers(schema, data)
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
