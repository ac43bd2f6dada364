"""The one config module: loads and validates every template and citizen config.

Sources, in order of precedence for a citizen:
1. `/etc/experience/<name>.json` - what the operator governs (budgets, model endpoints,
   mail addresses and allow-lists, permissions, approval counts), root-owned;
2. `CIV_ROOT/<name>/config.json` - the citizen's own config, once it has a home. On a
   server (the commons belongs to group `citizens`) only CITIZEN_KEYS count there: a
   citizen's model can write its home, so nothing it must not change may live there;
3. its entry in `templates/citizen_configs.json`, merged over that file's `defaults`.

Every file is validated when loaded. A bad file raises `ConfigError` naming the
file, the key and the fix - never a traceback from deep inside the code that
later uses the value.
"""

from __future__ import annotations

import json
import logging
import string
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from citizen import paths
from citizen.errors import ConfigError
from citizen.schemas import Schemas
from citizen.secrets import SECRET_KEYS, Secrets, load_secrets, parse_env, secrets_file
from shared.identity import server_mode as _commons_owned

# The secrets live in their own module (citizen.secrets); these names stay importable
# from here, where most callers look for them.
__all__ = ["SECRET_KEYS", "Secrets", "load_secrets", "parse_env", "secrets_file"]

SCHEMA_VERSION = 1
CONTEXT_TYPES = (
    "identity", "history", "goals", "relationships", "skills", "dreams", "working", "peer_monitor",
)
MANDATORY_SLOTS = {0: "REFLECT", 1: "LIBRARY", 4: "DRY_AUDIT", 7: "PEER_MONITOR"}
OWN_SLOTS = (2, 3, 5, 6, 8, 9)
PROVIDERS = ("auto", "anthropic", "local", "replay")
# What a citizen may set for itself on a server; every other key is the operator's.
CITIZEN_KEYS = ("focus", "strengths", "stream_bid")

_FIX_RESTORE = "compare with the shipped file (`git diff -- templates/`) or restore it"

@dataclass(frozen=True)
class CouncilSeat:
    """One model in a citizen's council: the tier (`role`) it serves and its temperature."""

    model: str
    role: str
    temperature: float


@dataclass(frozen=True)
class Budget:
    """Limits enforced before a call would exceed them: per wake, and the prompt's size
    per kind of call (citizen.prompt)."""

    max_usd_per_wake: float
    max_iterations: int
    max_output_tokens: int
    # Tokens of system prompt + contexts: the tool loop's calls, and structured steps
    # (votes, moves, bids). The contexts' caps add up to ≈214k; these keep a call small.
    prompt_tokens_execute: int = 24000
    prompt_tokens_step: int = 4000
    # The tool loop's conversation: past this the oldest tool results are dropped.
    conversation_tokens: int = 40000
    # Dollars per UTC day (citizen.spend): this citizen, and all citizens together. An
    # hourly citizen at its wake cap could spend $24 a day; these stop that at $10 / $30.
    max_usd_per_day: float = 10.0
    civilization_usd_per_day: float = 30.0
    # Enforced by the broker (citizen.broker), which holds the key: the citizen's month,
    # and how fast and how many at once its calls may go, so no one starves its peers.
    max_usd_per_month: float = 200.0
    max_calls_per_minute: int = 60
    max_concurrent_calls: int = 4
    # Work a citizen may start, so one runaway model cannot flood its peers: wakes rung
    # by the doorbell per hour (more wait for the window), debates and proposals it opens
    # per UTC day, and the seed's model calls per task (then it ends `failed`, saying so).
    max_doorbell_wakes_per_hour: int = 12
    max_debates_per_day: int = 3
    max_proposals_per_day: int = 5
    max_calls_per_task: int = 50
    max_usd_per_debate: float = 0.5  # the seed's target: past it the debate ends, saying so
    # What its home may hold on disk, in MiB: measured by root's timer (citizen.disk),
    # which stops the citizen's unit past it - the citizen cannot change either.
    max_home_mb: int = 2048


@dataclass(frozen=True)
class LLMSettings:
    """Which provider a citizen uses and where to reach it."""

    provider: str
    local_url: str = ""
    anthropic_base_url: str = ""


@dataclass(frozen=True)
class MailSettings:
    """Who may give a citizen tasks by mail, and the limits of its mailbox."""

    allowed_senders: tuple[str, ...]
    max_message_mb: float
    max_attachment_mb: float
    poll_seconds: float
    idle: bool
    processed_folder: str
    quarantine_folder: str
    max_sends_per_hour: int


@dataclass(frozen=True)
class LogSettings:
    """Wake-log retention (citizen.retention), in world days; operator-owned on a server."""

    full_days: float = 14.0  # kept whole: `citizen logs`, replays
    keep_days: float = 90.0  # kept gzipped until then, then deleted


@dataclass(frozen=True)
class CitizenConfig:
    """A citizen's validated configuration."""

    name: str
    email: str
    focus: str
    strengths: tuple[str, ...]
    council: tuple[CouncilSeat, ...]
    context_limits: Mapping[str, int]
    permissions: Mapping[str, bool]
    budget: Budget
    wake_interval_minutes: float
    library_approvals: int
    llm: LLMSettings
    mail: MailSettings
    source: Path
    debate_budgets: Mapping[str, tuple[int, int]] | None = None
    stream_bid: str = "auto"
    logs: LogSettings = LogSettings()

    def seat(self, tier: str) -> CouncilSeat:
        """The council seat serving `tier`; the primary seat when no seat has that role."""
        for seat in self.council:
            if seat.role == tier:
                return seat
        return next(s for s in self.council if s.role == "primary")


@dataclass(frozen=True)
class ModelPrice:
    """US dollars per million tokens of each kind."""

    input: float
    output: float
    cache_write: float
    cache_read: float


@dataclass(frozen=True)
class LocalModelSettings:
    """The embedded model's limits."""

    model: str
    context_tokens: int
    max_output_tokens: int
    threads: int
    max_concurrent_generations: int


@dataclass(frozen=True)
class RoleValues:
    """A Thought World role's value weights and the bounds they may move within."""

    weights: Mapping[str, float]
    bounds: Mapping[str, tuple[float, float]]


# ---------------------------------------------------------------- file loading


def _read(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(path, "", "file is missing", _FIX_RESTORE)
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


def _validate(path: Path, data: Any, schema: Mapping[str, Any]) -> None:
    import jsonschema  # noqa: PLC0415 - lazy: ≈90 ms, only paid when a file is loaded

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first, *more = errors
        problem = first.message + "".join(
            f"; also at {_key(e.absolute_path) or '(top level)'}: {e.message}" for e in more[:2])
        raise ConfigError(path, _key(first.absolute_path), problem, _FIX_RESTORE)
    if isinstance(data, dict) and "schema_version" in data:
        version = data["schema_version"]
        if version != SCHEMA_VERSION:
            raise ConfigError(
                path, "schema_version", f"version {version} is not the {SCHEMA_VERSION} "
                "this code understands", "use the file shipped with this version of the code",
            )


def _load(path: Path, schema: Mapping[str, Any]) -> Any:
    data = _read(path)
    _validate(path, data, schema)
    return data


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge dicts (lists and scalars in `over` replace those in `base`)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# ---------------------------------------------------------------- templates


class Templates:
    """Every file in `templates/`, loaded and cross-checked once."""

    def __init__(self, directory: Path, rules: Path | None = None) -> None:
        self.dir = directory
        # The rule files - caps, permissions, endpoints, prices - and their schemas come
        # from `rules` (paths.rules_dir: the release on a server, which no citizen
        # writes); prompts, wake types and output schemas from `directory`, which the
        # citizen evolves. The schemas of these files are data too, with the names only
        # code knows filled in; they are checked as JSON Schemas first.
        self.rules = rules or directory
        self._schemas = Schemas(self.rules / "schemas" / "config")
        self._configs = _load(self.rules / "citizen_configs.json",
                              self._schema("citizen_configs"))
        models = _load(self.rules / "models.json", self._schema("models"))
        self.prices = {m: ModelPrice(**p) for m, p in models["prices_usd_per_mtok"].items()}
        self.local = LocalModelSettings(**models["local"])
        self._prompts = _load(directory / "wake_prompts.json",
                              self._schema("wake_prompts"))["wakes"]
        self._alloc = _load(directory / "wake_allocations.json", self._schema("wake_allocations"))
        self._identities = _load(directory / "identity_templates.json",
                                 self._schema("identity_templates"))
        self.values = self._load_values(directory / "values.yaml")
        self.schemas = Schemas(directory / "schemas")
        self._check_allocations(directory / "wake_allocations.json")
        for name in self.citizen_names():
            self.citizen(name)  # validate every template citizen now, not at first use

    @property
    def wake_types(self) -> tuple[str, ...]:
        """Every wake type the templates describe."""
        return tuple(self._prompts)

    def citizen_names(self) -> list[str]:
        """The citizens the templates define, in file order."""
        return list(self._configs["citizens"])

    def citizen_data(self, name: str) -> dict[str, Any]:
        """A template citizen's config as plain data (defaults merged in)."""
        entry = self._configs["citizens"].get(name)
        if entry is None:
            raise ConfigError(
                self.rules / "citizen_configs.json", f"citizens.{name}", "no such citizen",
                f"known: {', '.join(self.citizen_names())}; add one or run `citizen onboard`",
            )
        return _merge(self._configs["defaults"], {"name": name, **entry})

    def default_budget(self) -> Budget:
        """The budget every citizen starts from (the rules file's `defaults`)."""
        return Budget(**self._configs["defaults"]["budget"])

    def citizen(self, name: str) -> CitizenConfig:
        """A template citizen's validated config."""
        return self.build_citizen(self.citizen_data(name), self.rules / "citizen_configs.json")

    def build_citizen(self, data: Mapping[str, Any], source: Path) -> CitizenConfig:
        """Validate merged citizen data and turn it into a `CitizenConfig`."""
        data = _merge(self._configs["defaults"], data)
        citizen = {"$defs": self._schema("citizen_configs")["$defs"],
                   "$ref": "#/$defs/citizen", "required": ["name", "email", "focus"]}
        _validate(source, data, citizen)
        name = paths.check_name(data["name"])
        council = tuple(CouncilSeat(**s) for s in data["council"])
        if not any(s.role == "primary" for s in council):
            raise ConfigError(source, f"{name}.council", "no seat has role 'primary'",
                              "give one council model the role 'primary'")
        for i, seat in enumerate(council):
            if seat.model not in self.prices:
                raise ConfigError(
                    source, f"{name}.council[{i}].model", f"no price for '{seat.model}'",
                    f"add it to {self.rules / 'models.json'} prices_usd_per_mtok",
                )
        limits = {**self._configs["defaults"]["context_limits"], **data["context_limits"]}
        missing = [t for t in CONTEXT_TYPES if t not in limits]
        if missing:
            raise ConfigError(source, f"{name}.context_limits", f"missing {missing}",
                              "give every context type a token cap")
        return CitizenConfig(
            name=name,
            email=data["email"],
            focus=data["focus"],
            strengths=tuple(data.get("strengths", ())),
            council=council,
            context_limits=limits,
            permissions=dict(data["permissions"]),
            budget=Budget(**data["budget"]),
            wake_interval_minutes=float(data["wake_interval_minutes"]),
            library_approvals=int(data["library_approvals"]),
            debate_budgets={k: (int(v[0]), int(v[1])) for k, v in
                            data["debate_budgets"].items()} if data.get("debate_budgets")
            else None,
            stream_bid=str(data.get("stream_bid", "auto")),
            logs=LogSettings(**data.get("logs", {})),
            llm=LLMSettings(**data["llm"]),
            mail=MailSettings(**{**data["mail"], "allowed_senders": tuple(
                a.strip().lower() for a in data["mail"].get("allowed_senders", ()))}),
            source=source,
        )

    def wake_slots(self, name: str) -> dict[int, str]:
        """Slot (0-9) → wake type for a citizen."""
        own = self._alloc["citizens"].get(name, self._alloc["default"])
        return dict(sorted((int(k), v) for k, v in {**own, **self._alloc["mandatory"]}.items()))

    def values_profile(self, name: str) -> str:
        """The value-weight profile a citizen starts from (integrator when none is set)."""
        entry = self._configs["citizens"].get(name, {})
        return str(entry.get("values_profile", "integrator"))

    def wake_prompt(self, wake_type: str, /, **variables: object) -> str:
        """The user-turn instruction for a wake type, with `${…}` placeholders filled."""
        entry = self._prompts.get(wake_type)
        if entry is None:
            raise ConfigError(self.dir / "wake_prompts.json", f"wakes.{wake_type}",
                              "no prompt for this wake type", "add an entry for it")
        return string.Template(entry["prompt"]).safe_substitute(variables)

    def prompt(self, prompt_name: str, /, **variables: object) -> str:
        """A prompt file from `templates/prompts/` with `${…}` placeholders filled."""
        path = self.dir / "prompts" / f"{prompt_name}.txt"
        if not path.is_file():
            raise ConfigError(path, "", "prompt file is missing", _FIX_RESTORE)
        return string.Template(path.read_text(encoding="utf-8")).safe_substitute(variables)

    def _schema(self, name: str) -> dict[str, Any]:
        """The schema of one of the files here."""
        return self._schemas.get(name, context_types=list(CONTEXT_TYPES),
                                 providers=list(PROVIDERS))

    def schema(self, name: str, /, **fill: object) -> dict[str, Any]:
        """An output schema from `templates/schemas/` with its placeholders filled."""
        return self.schemas.get(name, **fill)

    def identity(self, name: str, focus: str = "") -> str:
        """The starting identity text for a citizen (the default template for new ones)."""
        entry = self._identities["citizens"].get(name, self._identities["default"])
        return string.Template(entry["identity"]).safe_substitute(name=name, focus=focus)

    @property
    def philosophy(self) -> Mapping[str, list[str]]:
        """The philosophy every identity carries."""
        return dict(self._identities["philosophy"])

    def _check_allocations(self, path: Path) -> None:
        mandatory = {int(k): v for k, v in self._alloc["mandatory"].items()}
        if mandatory != MANDATORY_SLOTS:
            raise ConfigError(path, "mandatory", f"must be exactly {MANDATORY_SLOTS}",
                              "mandatory wakes are the same for every citizen")
        tables = {"default": self._alloc["default"],
                  **{f"citizens.{c}": s for c, s in self._alloc["citizens"].items()}}
        for key, slots in tables.items():
            got = sorted(int(k) for k in slots)
            if got != list(OWN_SLOTS):
                raise ConfigError(path, key, f"covers slots {got}",
                                  f"give exactly slots {list(OWN_SLOTS)} (0, 1, 4, 7 are "
                                  "mandatory)")
            for slot, wake in slots.items():
                if wake not in self._prompts:
                    raise ConfigError(path, f"{key}.{slot}", f"unknown wake type '{wake}'",
                                      f"use one of {', '.join(self._prompts)}")

    def _load_values(self, path: Path) -> dict[str, RoleValues]:
        data = _load(path, self._schema("values"))
        base = set(data["base_values"])
        roles: dict[str, RoleValues] = {}
        for role, spec in data["agent_roles"].items():
            for part in ("weights", "bounds"):
                if set(spec[part]) != base:
                    raise ConfigError(path, f"agent_roles.{role}.{part}",
                                      f"values {sorted(spec[part])} differ from base_values",
                                      f"give exactly {sorted(base)}")
            for value, weight in spec["weights"].items():
                lo, hi = spec["bounds"][value]
                if not lo <= weight <= hi:
                    raise ConfigError(path, f"agent_roles.{role}.weights.{value}",
                                      f"{weight} is outside its bounds [{lo}, {hi}]",
                                      "move the weight or the bound")
            roles[role] = RoleValues(dict(spec["weights"]),
                                     {v: (b[0], b[1]) for v, b in spec["bounds"].items()})
        return roles


@cache
def _templates_at(directory: Path, rules: Path) -> Templates:
    return Templates(directory, rules)


def templates() -> Templates:
    """The validated templates of this checkout, with the rules from `paths.rules_dir`
    (loaded once per pair of directories)."""
    return _templates_at(paths.templates_dir(), paths.rules_dir())


def server_mode() -> bool:
    """A server install: the commons belongs to group `citizens` (setup_server.sh)."""
    return _commons_owned(paths.shared_dir())


def medium_programs() -> frozenset[str]:
    """The operator's list of shell commands a proposal may run at medium stakes
    (`stakes.json` in the operator's directory: `{"medium_programs": ["make"]}`; root's
    on a server, so no citizen can lengthen it). None listed: every unknown program is
    high (shared.consensus.stakes). A malformed file counts as an empty list - the safe
    side - and is reported (once per content) naming the fix, so a typo stops no wake.
    """
    path = paths.operator_dir() / "stakes.json"
    if not path.is_file():
        return frozenset()
    try:
        listed = _object(path).get("medium_programs", [])
        if not isinstance(listed, list) or not all(
                isinstance(p, str) and p.strip() and "/" not in p for p in listed):
            raise ConfigError(path, "medium_programs", "must be a list of command names",
                              'write e.g. {"medium_programs": ["make", "npm test"]} '
                              "(names, no paths)")
    except (ConfigError, UnicodeDecodeError) as exc:
        _warn_stakes(str(exc))
        return frozenset()
    return frozenset(" ".join(p.split()) for p in listed)


@cache
def _warn_stakes(problem: str) -> None:
    logging.getLogger(__name__).warning("%s - every unknown program stays high until then",
                                        problem)


def _object(path: Path) -> dict[str, Any]:
    data = _read(path)
    if not isinstance(data, dict):
        raise ConfigError(path, "", "must be a JSON object", "restore it from a backup")
    return data


def load_citizen(name: str, *, own: bool = True) -> CitizenConfig:
    """A citizen's config: the operator's rules over its own `config.json` over its
    template (module doc). On a server the citizen's file may only set CITIZEN_KEYS;
    anything else in it is ignored with a warning naming the file to edit instead.

    :raises ConfigError: a file is invalid, or the citizen is unknown.
    """
    tpl = templates()
    # own=False: the operator's rules alone (the broker, which cannot read a home).
    mine, rules = paths.citizen_config_file(name), paths.operator_rules_file(name)
    has_own = own and mine.is_file()
    if not has_own and not rules.is_file():
        return tpl.citizen(name)
    base = tpl.citizen_data(name) if name in tpl.citizen_names() else {}
    data = _object(mine) if has_own else {}
    if server_mode():
        ignored = sorted(k for k in data if k not in (*CITIZEN_KEYS, "name"))
        if ignored:
            _warn_ignored(str(mine), tuple(ignored), str(rules))
        data = {k: v for k, v in data.items() if k in CITIZEN_KEYS}
    merged = _merge(base, data)
    source = mine
    if rules.is_file():
        merged, source = _merge(merged, _object(rules)), rules
    return tpl.build_citizen({**merged, "name": name}, source)


@cache
def _warn_ignored(own: str, keys: tuple[str, ...], rules: str) -> None:
    logging.getLogger(__name__).warning(
        "%s sets %s, which only the operator governs on a server: ignored (edit %s)",
        own, ", ".join(keys), rules)
