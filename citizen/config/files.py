"""Reading one configuration file: JSON or YAML, validated against its schema, every
problem a `ConfigError` naming the file, the key and the fix."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from citizen.config.settings import FIX_RESTORE, SCHEMA_VERSION
from citizen.errors import ConfigError


def read_file(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(path, "", "file is missing", FIX_RESTORE)
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml  # noqa: PLC0415 - lazy: keeps `citizen --help` fast
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(path, "", f"not valid YAML ({exc})", "fix the syntax") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            path, "", f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            "fix the syntax; `python -m json.tool FILE` points at the spot",
        ) from exc


def _key(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def validate(path: Path, data: Any, schema: Mapping[str, Any]) -> None:
    import jsonschema  # noqa: PLC0415 - lazy: ≈90 ms, only paid when a file is loaded

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first, *more = errors
        problem = first.message + "".join(
            f"; also at {_key(e.absolute_path) or '(top level)'}: {e.message}" for e in more[:2])
        raise ConfigError(path, _key(first.absolute_path), problem, FIX_RESTORE)
    if isinstance(data, dict) and "schema_version" in data:
        version = data["schema_version"]
        if version != SCHEMA_VERSION:
            raise ConfigError(
                path, "schema_version", f"version {version} is not the {SCHEMA_VERSION} "
                "this code understands", "use the file shipped with this version of the code",
            )


def load_file(path: Path, schema: Mapping[str, Any]) -> Any:
    data = read_file(path)
    validate(path, data, schema)
    return data


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge dicts (lists and scalars in `over` replace those in `base`)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_object(path: Path) -> dict[str, Any]:
    data = read_file(path)
    if not isinstance(data, dict):
        raise ConfigError(path, "", "must be a JSON object", "restore it from a backup")
    return data
