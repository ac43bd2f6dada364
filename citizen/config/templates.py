"""The templates: every file in `templates/` (or the release's, on a server), loaded and
cross-checked once, with the operator's rules from `paths.rules_dir`."""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from citizen.config import paths
from citizen.config.files import load_file, merge, validate
from citizen.config.schemas import Schemas
from citizen.config.settings import (
    CONTEXT_TYPES,
    FIX_RESTORE,
    MANDATORY_SLOTS,
    OWN_SLOTS,
    PROVIDERS,
    Budget,
    CitizenConfig,
    CouncilSeat,
    EvolutionSettings,
    LLMSettings,
    LocalModelSettings,
    LogSettings,
    MailSettings,
    ModelPrice,
    RoleValues,
    WebSettings,
)
from citizen.errors import ConfigError

_VALID_MAX = 4096  # citizen contents remembered as valid (`Templates.build_citizen`)


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
        self._valid: set[str] = set()  # citizen data (JSON, sorted keys) that passed
        self._schemas = Schemas(self.rules / "schemas" / "config")
        self._configs = load_file(self.rules / "citizen_configs.json",
                              self._schema("citizen_configs"))
        models = load_file(self.rules / "models.json", self._schema("models"))
        self.prices = {m: ModelPrice(**p) for m, p in models["prices_usd_per_mtok"].items()}
        self.local = LocalModelSettings(**models["local"])
        self._prompts = load_file(directory / "wake_prompts.json",
                                  self._schema("wake_prompts"))["wakes"]
        self._alloc = load_file(directory / "wake_allocations.json",
                                self._schema("wake_allocations"))
        self._identities = load_file(directory / "identity_templates.json",
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
        return merge(self._configs["defaults"], {"name": name, **entry})

    def default_budget(self) -> Budget:
        """The budget every citizen starts from (the rules file's `defaults`)."""
        return Budget(**self._configs["defaults"]["budget"])

    def citizen(self, name: str) -> CitizenConfig:
        """A template citizen's validated config."""
        return self.build_citizen(self.citizen_data(name), self.rules / "citizen_configs.json")

    def build_budget(self, data: Mapping[str, Any], source: Path) -> Budget:
        """The budget of merged citizen data, only it validated (`build_citizen` checks
        the whole)."""
        budget = merge(self._configs["defaults"], data)["budget"]
        # Once per content, as build_citizen: `citizen status` asks every citizen's
        # budget, and most are the same defaults under the same operator's rules.
        content = _content({"budget": budget})
        key = None if content is None else f"budget:{content}"
        if key is None or key not in self._valid:
            validate(source, {"budget": budget}, self._budget_schema)
            if len(self._valid) >= _VALID_MAX:
                self._valid.clear()
            if key is not None:
                self._valid.add(key)
        return Budget(**budget)

    @cached_property
    def _budget_schema(self) -> dict[str, Any]:
        return {"$defs": self._schema("citizen_configs")["$defs"], "type": "object",
                "properties": {"budget": {"$ref": "#/$defs/citizen/properties/budget"}}}

    def build_citizen(self, data: Mapping[str, Any], source: Path) -> CitizenConfig:
        """Validate merged citizen data and turn it into a `CitizenConfig`."""
        data = merge(self._configs["defaults"], data)
        # Each content is checked against the schema once per Templates (the schema is
        # this object's): the template citizens at start, then the same data again for
        # every wake that loads one. Only data that passed is remembered.
        content = _content(data)
        if content is None or content not in self._valid:
            citizen = {"$defs": self._schema("citizen_configs")["$defs"],
                       "$ref": "#/$defs/citizen", "required": ["name", "email", "focus"]}
            validate(source, data, citizen)
            if len(self._valid) >= _VALID_MAX:
                self._valid.clear()  # a crowd's process loads many citizens: bounded
            if content is not None:
                self._valid.add(content)
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
            web=WebSettings(**{**data.get("web", {}), "allow": tuple(
                h.strip().lower() for h in data.get("web", {}).get("allow", ()))}),
            evolution=EvolutionSettings(**data.get("evolution", {})),
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
            raise ConfigError(path, "", "prompt file is missing", FIX_RESTORE)
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

    def system_prompt(self, name: str, focus: str, budget: Budget) -> tuple[str, str]:
        """The two blocks every call of a citizen starts with: (the shared block, the
        citizen's own). The shared block - how a citizen works and the philosophy (the
        seed: "encoded in every citizen's identity"), one line per principle - is the same
        bytes for every citizen, so with the tools before it it is one prompt-cache entry
        the whole civilization reads (issue 45); who the citizen is, its focus and budget
        come after it."""
        philosophy = "\n".join(f"- {line}" for lines in self.philosophy.values()
                               for line in lines)
        own = self.prompt("citizen", name=name, focus=focus,
                          max_usd_per_wake=budget.max_usd_per_wake,
                          max_iterations=budget.max_iterations)
        return self.prompt("system", philosophy=philosophy), own

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
        data = load_file(path, self._schema("values"))
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


def _content(data: Mapping[str, Any]) -> str | None:
    """`data` as JSON with sorted keys; None when a value is not plain JSON (a YAML
    date: its text would pass for a string), which is then checked every time."""
    try:
        return json.dumps(data, sort_keys=True)
    except TypeError:
        return None


@cache
def _templates_at(directory: Path, rules: Path) -> Templates:
    return Templates(directory, rules)


def templates() -> Templates:
    """The validated templates of this checkout, with the rules from `paths.rules_dir`
    (loaded once per pair of directories)."""
    return _templates_at(paths.templates_dir(), paths.rules_dir())
