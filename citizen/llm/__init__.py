"""Model providers behind one interface (`citizen.llm.base.Provider`).

This package's import is cheap: a provider's module - and with it a model SDK or
llama.cpp - is imported only when `make_provider` builds that provider. A new provider
is one module here, built in `make_provider`. May import home (the spend ledger),
access (the broker's socket), config and errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from citizen import config as cfg
from citizen.access import client, permit
from citizen.errors import ConfigError, ProviderUnavailable
from citizen.llm.base import Provider, Reply, Request, ToolCall, ToolSpec, Usage
from citizen.llm.replay import ReplayProvider

__all__ = ["Choice", "Provider", "Reply", "Request", "ToolCall", "ToolSpec", "Usage",
           "choose", "make_provider"]


class Choice(NamedTuple):
    """Which provider a citizen uses, and why - said to the operator. `keyed`: a model
    key is known to be there (`auto` asked already; no second question to the broker)."""

    name: str
    reason: str
    keyed: bool = False


def _has_key(config: cfg.CitizenConfig, secrets: cfg.Secrets) -> bool:
    """A model key is configured for the citizen: the broker says so on a server (the key
    is its alone); in dev mode the secrets every process reads."""
    if cfg.server_mode():
        return client.whoami(config.name).get("provider") == "anthropic"
    return bool(secrets.get("ANTHROPIC_API_KEY"))


def choose(config: cfg.CitizenConfig, secrets: cfg.Secrets, override: str = "") -> Choice:
    """Resolve `auto`: anthropic when an API key is configured, else the embedded model.

    :raises ConfigError: an unknown provider name.
    :raises ProviderUnavailable: on a server, the broker does not answer.
    """
    name = override or secrets.get("EXPERIENCE_PROVIDER") or config.llm.provider
    if name not in cfg.PROVIDERS:
        raise ConfigError(config.source, "llm.provider", f"unknown provider '{name}'",
                          f"use one of {', '.join(cfg.PROVIDERS)}")
    if name != "auto":
        how = "--provider" if override else (
            "EXPERIENCE_PROVIDER" if secrets.get("EXPERIENCE_PROVIDER") else "llm.provider")
        return Choice(name, f"set by {how}")
    if _has_key(config, secrets):
        return Choice("anthropic", "auto: the broker holds a model key for it"
                      if cfg.server_mode() else "auto: ANTHROPIC_API_KEY is set", keyed=True)
    return Choice("local", "auto: the broker holds no model key for it, so the embedded "
                  "local model" if cfg.server_mode()
                  else "auto: no ANTHROPIC_API_KEY, so the embedded local model")


def make_provider(
    config: cfg.CitizenConfig,
    secrets: cfg.Secrets,
    override: str = "",
    replay_log: Path | None = None,
) -> Provider:
    """Build the provider a citizen should use.

    :raises ProviderUnavailable: the chosen provider cannot run here (no key, no model,
        no wake permit on a server).
    :raises ConfigError: the configuration names something unknown.
    """
    choice = choose(config, secrets, override)
    templates = cfg.templates()
    if choice.name == "anthropic":
        # Every call goes through the broker (citizen.broker), which holds the key, the
        # prices and the caps: the SDK is real, only its transport is the broker's socket.
        if not choice.keyed and not _has_key(config, secrets):
            where = (f"/etc/experience/{config.name}.env (the broker's)" if cfg.server_mode()
                     else f"{config.source.parent / '.env'} or the environment")
            raise ProviderUnavailable(f"provider 'anthropic' needs an API key - put "
                                      f"ANTHROPIC_API_KEY=… in {where}, or use --provider local")
        # A model that works runs under a wake permit: on a server, a process no daemon's
        # permit covers (`citizen wake` by hand, a roll-up, a tool) takes its own here.
        permit.for_this_process(config.name)
        from citizen.llm.anthropic_api import AnthropicProvider  # noqa: PLC0415 - 2 s import

        return AnthropicProvider(config, templates.prices, client.PLACEHOLDER_KEY,
                                 base_url=client.BASE_URL, timeout_s=client.CALL_TIMEOUT_S,
                                 http_client=client.http_client(config.name))
    if choice.name == "replay":
        if replay_log is None:
            raise ProviderUnavailable("provider 'replay' needs a recorded wake log to answer "
                                      "from - pass --replay LOG")
        return ReplayProvider.from_log(replay_log)
    permit.for_this_process(config.name)  # the local model works on this CPU: as above
    from citizen.llm.local import LocalProvider  # noqa: PLC0415 - ≈150 ms (jsonschema)

    url = secrets.get("EXPERIENCE_LOCAL_URL") or config.llm.local_url
    return LocalProvider(config, templates.local, templates.prices, url=url)
