"""The operator's rules for one caller, as the broker enforces them.

Read only from what the citizens cannot write: the broker's own templates (on a server
the root-owned release in /opt/experience/release, which the broker runs from - never a
citizen's `~/code/templates`), the operator's `/etc/experience/<citizen>.json` and
`broker.json`, and the citizen's secrets file there (the broker's user alone reads it).
In dev mode (one Unix user) the citizen's home config and `.env` are the operator's.

Loading a config validates it (milliseconds), so rules are cached per citizen and read
again when one of their files changes (a stat per file per call).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citizen import config
from citizen.broker.ledger import Caps
from citizen.config import ModelPrice, paths
from citizen.config.secrets import load_secrets, parse_env
from citizen.errors import ConfigError

BROKER_FILE = "broker.json"  # civilization-wide rules: {"civilization_usd_per_month": …}
MONTH_DAYS = 30  # a civilization monthly cap not set: 30 of its days


@dataclass(frozen=True)
class Upstream:
    """Where a caller's model calls go, with the key (never shown in a repr)."""

    base_url: str
    api_key: str

    def __repr__(self) -> str:
        return f"Upstream({self.base_url!r}, key=…)"


@dataclass(frozen=True)
class CallerRules:
    """Everything the broker checks for one citizen's call."""

    citizen: str
    prices: dict[str, ModelPrice]  # the models it may call (its council), priced
    caps: Caps
    upstream: Upstream | None  # None: no key configured - the embedded model only
    calls_per_minute: int
    concurrent: int


def operator_file(name: str) -> Path:
    return paths.operator_dir() / name


def broker_settings() -> tuple[Path, dict[str, Any]]:
    """The civilization-wide rules (`broker.json` in the operator's directory) and where
    they come from; {} when the operator wrote none.

    :raises ConfigError: the file is not a JSON object.
    """
    path = operator_file(BROKER_FILE)
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))  # door: /etc/experience
        except (OSError, ValueError) as exc:
            raise ConfigError(path, "", f"cannot be read as JSON ({exc})",
                              "fix it (python -m json.tool FILE shows where)") from exc
        if not isinstance(data, dict):
            raise ConfigError(path, "", "must be a JSON object", "restore it")
    return path, data


def _civilization(default_day: float) -> tuple[float, float]:
    path, data = broker_settings()
    day = _number(path, data, "civilization_usd_per_day", default_day)
    return day, _number(path, data, "civilization_usd_per_month", day * MONTH_DAYS)


def _number(path: Path, data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(path, key, f"{value!r} is not a number of dollars",
                          "give a number of US dollars, 0 or more")
    return float(value)


def load(name: str) -> CallerRules:
    """The rules for citizen `name`, fresh from the files.

    :raises ConfigError: a file is invalid (the message names it and the fix).
    """
    # On a server the citizen's own config.json sets nothing the broker enforces (and
    # the broker's user cannot read a home): the templates and the operator's file only.
    cfg = config.load_citizen(name, own=not config.server_mode())
    tpl = config.templates()
    prices = {s.model: tpl.prices[s.model] for s in cfg.council}
    # The civilization's cap is one for everyone: broker.json, else the release's
    # defaults - never a value one citizen's rules file could set for itself alone.
    civ_day, civ_month = _civilization(tpl.default_budget().civilization_usd_per_day)
    caps = Caps(citizen_day=cfg.budget.max_usd_per_day,
                citizen_month=cfg.budget.max_usd_per_month,
                civilization_day=civ_day, civilization_month=civ_month)
    values = _secrets(name)
    key = values.get("ANTHROPIC_API_KEY", "")
    base_url = values.get("ANTHROPIC_BASE_URL") or cfg.llm.anthropic_base_url \
        or "https://api.anthropic.com"
    return CallerRules(
        citizen=name, prices=prices, caps=caps,
        upstream=Upstream(base_url.rstrip("/"), key) if key else None,
        calls_per_minute=cfg.budget.max_calls_per_minute,
        concurrent=cfg.budget.max_concurrent_calls)


def _secrets(name: str) -> dict[str, str]:
    """The citizen's secrets as the broker reads them: on a server the operator's file
    alone (never a credential directory, the home or the environment); in dev mode as
    every dev-mode process does (the home's `.env`, then the environment)."""
    if config.server_mode():
        path = paths.operator_secrets_file(name)
        return parse_env(path) if path.is_file() else {}
    return dict(load_secrets(name).values)


class RuleCache:
    """Rules per citizen, loaded again when one of the files they come from changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: dict[str, tuple[tuple[Any, ...], CallerRules]] = {}
        # citizen -> the files its rules come from. Where they are follows from the
        # environment and server mode, both fixed for the broker's life (Broker.server_mode
        # is read once too); finding them anew took most of a call's rules check (about
        # 100 us of paths and server-mode stats), the stats of the files themselves stay
        # per call, so an edited rule still counts from the next call.
        self._files: dict[str, tuple[Path, ...]] = {}

    def get(self, name: str) -> CallerRules:
        files = self._files.get(name)
        if files is None:
            files = self._files.setdefault(name, self.files(name))
        stamp = _stat(files)
        with self._lock:
            hit = self._cached.get(name)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        rules = load(name)
        with self._lock:
            self._cached[name] = (stamp, rules)
        return rules

    @staticmethod
    def files(name: str) -> tuple[Path, ...]:
        """The files `name`'s rules come from."""
        files = [paths.operator_rules_file(name), paths.operator_secrets_file(name),
                 operator_file(BROKER_FILE)]
        if not config.server_mode():  # on a server nothing in a home is a rule
            files += [paths.citizen_config_file(name), paths.citizen_env_file(name)]
        return tuple(files)

    @staticmethod
    def stamp(name: str) -> tuple[Any, ...]:
        """What `name`'s rule files are now: changed, its rules are read again."""
        return _stat(RuleCache.files(name))


def _stat(files: tuple[Path, ...]) -> tuple[Any, ...]:
    out: list[Any] = []
    for path in files:
        try:
            st = path.stat()
        except OSError:
            out.append(None)
            continue
        out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)
