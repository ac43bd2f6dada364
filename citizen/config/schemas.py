"""Output schemas as data: `templates/schemas/<name>.json`, filled with what only code knows.

A structured step (a proposal, a vote, a debate move) asks the model for JSON that
matches one of these files. What varies by call - the base values, the citizens,
the moves the rules allow now - is a placeholder the caller fills:

    {"$enum": "values"}                    -> {"enum": [...the values...]}
    {"$each": "values", "schema": {...}}   -> {"<value>": {...}, ...}  (e.g. properties)
    {"$value": "max_step"}                 -> the value itself (a number, a string)

A `$value` placeholder holds a number when its name ends in `_step` or starts with
`max_` or `min_` (the load-time check fills it with one); anything else holds a list.

Every file is parsed and checked as a JSON Schema (placeholders filled with samples)
when the templates load, so a broken file fails at start with its path, not in a wake.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from citizen.errors import ConfigError

_FIX = "restore the file from the checkout (git checkout templates/schemas)"


class Schemas:
    """The output schemas in one templates directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._raw: dict[str, Any] = {}
        if not directory.is_dir():
            raise ConfigError(directory, "", "the output schemas are missing", _FIX)
        for path in sorted(directory.glob("*.json")):
            self._raw[path.stem] = _check(path)

    def names(self) -> list[str]:
        return sorted(self._raw)

    def get(self, name: str, /, **fill: Any) -> dict[str, Any]:
        """Schema `name` with its placeholders filled from `fill`.

        :raises ConfigError: no such schema, or a placeholder `fill` does not name.
        """
        if name not in self._raw:
            raise ConfigError(self.dir / f"{name}.json", "", "no such output schema", _FIX)
        try:
            out: dict[str, Any] = _fill(self._raw[name], fill)
        except KeyError as exc:
            raise ConfigError(self.dir / f"{name}.json", "", f"placeholder {exc} is not "
                              "filled by the code that uses it", _FIX) from exc
        return out


def _fill(node: Any, fill: Mapping[str, Any]) -> Any:
    if isinstance(node, list):
        return [_fill(x, fill) for x in node]
    if not isinstance(node, dict):
        return node
    if "$enum" in node:
        return {"enum": list(fill[node["$enum"]])}
    if "$each" in node:
        return {str(k): _fill(node["schema"], fill) for k in fill[node["$each"]]}
    if "$value" in node:
        return fill[node["$value"]]
    return {k: _fill(v, fill) for k, v in node.items()}


class _Samples(dict):  # type: ignore[type-arg]
    """Any placeholder filled with a sample, to check a file's shape."""

    def __missing__(self, key: str) -> Any:
        if key.endswith("_schema"):  # a schema composed of another: any schema will do
            return {}
        return 1 if "step" in key or key.startswith(("max_", "min_")) else ["sample"]


@cache
def _validator() -> Any:
    import jsonschema  # noqa: PLC0415 - lazy: ≈90 ms, only when templates load

    return jsonschema.Draft202012Validator


def _check(path: Path) -> Any:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(path, "", f"not valid JSON: {exc}", _FIX) from exc
    import jsonschema  # noqa: PLC0415 - lazy, as above

    try:
        _validator().check_schema(_fill(raw, _Samples()))
    except jsonschema.SchemaError as exc:
        raise ConfigError(path, "/".join(map(str, exc.absolute_path)),
                          f"not a JSON Schema: {exc.message}", _FIX) from exc
    return raw
