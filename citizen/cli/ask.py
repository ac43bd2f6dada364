"""`citizen ask`: one model call through the configured provider."""

from __future__ import annotations

import json

import click

from citizen import config
from citizen.cli.options import citizen_option, json_option, provider_option, resolve_name
from citizen.cli.terminal import echo
from citizen.llm import choose, make_provider
from citizen.llm.base import Request
from citizen.wake.flow import call_outside_wake


@click.command()
@click.argument("prompt")
@citizen_option
@provider_option
@click.option("--tier", default="primary", show_default=True,
              help="Council role whose model answers (primary, fast, …).")
@click.option("--max-tokens", type=click.IntRange(1, 64000), default=256, show_default=True)
@json_option
def ask(*, prompt: str, name: str | None, provider: str | None, tier: str, max_tokens: int,
        as_json: bool) -> None:
    """Ask the model one question and print the reply, tokens and cost.

    \b
    Examples:
      citizen ask "Name three uses of a file lock."
      citizen ask --tier fast --max-tokens 50 "Say hi"
      citizen ask --json "Say hi" | jq .cost_usd
    """
    name = resolve_name(name)
    cfg = config.load_citizen(name)
    secrets = config.load_secrets(name)
    choice = choose(cfg, secrets, provider or "")
    llm = make_provider(cfg, secrets, provider or "")
    system = list(config.templates().system_prompt(cfg.name, cfg.focus, cfg.budget))
    request = Request(messages=[{"role": "user", "content": prompt}], system=system,
                      max_tokens=max_tokens, tier=tier, purpose="ask", shared=1)
    # The citizen's own key and budget: in its ledger and under its daily caps.
    reply = call_outside_wake(name, "ASK", llm, request)
    if as_json:
        echo(json.dumps({**reply.to_dict(), "citizen": name, "provider_reason":
                               choice.reason}, indent=2))
        return
    echo(reply.text.strip())
    u = reply.usage
    echo(
        f"-- {reply.model} via {choice.name} ({choice.reason}): {u.input_tokens} in, "
        f"{u.output_tokens} out, {u.cache_read_tokens} cache read, {u.cache_write_tokens} "
        f"cache write tokens; ${reply.cost_usd:.6f}; {reply.latency_s:.2f} s")
