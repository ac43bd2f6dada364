"""A citizen's configuration, layered: the operator's rules over its own `config.json`
over its template (see `citizen.config.settings`); and the operator's other rules a
running citizen reads (server mode, the medium-stakes programs)."""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path
from typing import Any

from citizen.config import paths
from citizen.config.files import merge, read_object
from citizen.config.settings import CITIZEN_KEYS, Budget, CitizenConfig
from citizen.config.templates import Templates, templates
from citizen.errors import ConfigError
from shared.identity import server_mode as _commons_owned


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
        listed = read_object(path).get("medium_programs", [])
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


def load_citizen(name: str, *, own: bool = True) -> CitizenConfig:
    """A citizen's config: the operator's rules over its own `config.json` over its
    template (module doc). On a server the citizen's file may only set CITIZEN_KEYS;
    anything else in it is ignored with a warning naming the file to edit instead.

    :raises ConfigError: a file is invalid, or the citizen is unknown.
    """
    tpl = templates()
    layered = _layers(tpl, name, own)
    if layered is None:
        return tpl.citizen(name)
    merged, source = layered
    return tpl.build_citizen({**merged, "name": name}, source)


def load_budget(name: str, *, own: bool = True) -> Budget:
    """A citizen's budget from the same layers as `load_citizen`, only the budget checked:
    what `citizen status` reads of every citizen (the whole check is ~0.4 ms a citizen, most
    of a status row; a file broken elsewhere still fails `load_citizen`, i.e. its wakes).

    :raises ConfigError: the budget is invalid, or the citizen is unknown.
    """
    tpl = templates()
    layered = _layers(tpl, name, own)
    if layered is None:
        return tpl.build_budget(tpl.citizen_data(name), tpl.rules / "citizen_configs.json")
    return tpl.build_budget(*layered)


def _layers(tpl: Templates, name: str, own: bool) -> tuple[dict[str, Any], Path] | None:
    """The merged layers of `name`'s config and the file that had the last word; None
    when only its template speaks."""
    # own=False: the operator's rules alone (the broker, which cannot read a home).
    mine, rules = paths.citizen_config_file(name), paths.operator_rules_file(name)
    has_own = own and mine.is_file()
    if not has_own and not rules.is_file():
        return None
    base = tpl.citizen_data(name) if name in tpl.citizen_names() else {}
    data = read_object(mine) if has_own else {}
    if server_mode():
        ignored = sorted(k for k in data if k not in (*CITIZEN_KEYS, "name"))
        if ignored:
            _warn_ignored(str(mine), tuple(ignored), str(rules))
        data = {k: v for k, v in data.items() if k in CITIZEN_KEYS}
    merged = merge(base, data)
    source = mine
    if rules.is_file():
        merged, source = merge(merged, read_object(rules)), rules
    return merged, source


@cache
def _warn_ignored(own: str, keys: tuple[str, ...], rules: str) -> None:
    logging.getLogger(__name__).warning(
        "%s sets %s, which only the operator governs on a server: ignored (edit %s)",
        own, ", ".join(keys), rules)
