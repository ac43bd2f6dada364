"""`citizen memory`: roll-ups (run by the daemon's schedule) and search."""

from __future__ import annotations

import json

import click

from citizen import config
from citizen.cli.options import citizen_argument
from citizen.cli.terminal import echo
from citizen.config import paths
from citizen.home.memory import Memory
from citizen.llm import make_provider
from citizen.llm.base import Request
from citizen.wake.flow import outside_wake


@click.group()
def memory() -> None:
    """A citizen's hierarchical memory."""


@memory.command()
@citizen_argument
def rollup(name: str) -> None:
    """Write the due daily, weekly and monthly summaries of citizen NAME (model calls)."""
    home = paths.home(name)
    paths.require_owner(home)
    mem = Memory(home.memory)
    if not mem.pending():
        echo("nothing to roll up")
        return
    cfg = config.load_citizen(name)
    llm = make_provider(cfg, config.load_secrets(name))
    # Through the one meter: in the spend ledger, under the daily caps, logged as ROLLUP.
    with outside_wake(name, "ROLLUP") as meter:

        def summarize(level: str, key: str, text: str) -> str:
            prompt = (f"Summarize these memories of {name} into a {level} summary for {key}. "
                      f"Keep what was done, learned and left open; drop repetition.\n\n{text}")
            reply = meter.call(llm, Request(messages=[{"role": "user", "content": prompt}],
                                            max_tokens=600, tier="fast",
                                            purpose=f"rollup_{level}"))
            return f"# {level} summary {key}\n\n{reply.text.strip()}\n"

        for path in mem.rollup(summarize):
            echo(f"wrote {path}")


@memory.command()
@citizen_argument
@click.argument("query")
def search(name: str, query: str) -> None:
    """Search citizen NAME's memory."""
    echo(json.dumps(Memory(paths.home(name).memory).search(query), indent=2))
