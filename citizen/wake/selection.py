"""Before the work: which tools to offer (offer, select) and which model tier to use
(route).

With a provider whose prompt cache the civilization shares (the API's), a loop wake
offers its whole catalogue - every tool the operator permits the citizen, the same set
and order in every wake - and no model picks: the tools open the prefix every citizen
sends, so a pick per task (a different set each wake) made each wake's first call miss
the cache another citizen had just written (issue 45). Otherwise (the local model: a
small context, no shared cache) the fast model picks, and the route is asked either way;
each with a schema-validated structured call. If that call fails, a deterministic rule
decides, so a wake never depends on it succeeding.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from citizen.config import Templates
from citizen.errors import ProviderError, StructuredOutputError
from citizen.llm.base import Provider, Request
from citizen.tools.base import Tool
from citizen.wake.meter import Meter

SELECT_LIMIT = 12
# What most work needs whatever its words: reading, writing and running things.
WORKING = ("read_file", "write_file", "append_file", "str_replace_file", "shell_command")
# The council's roles, cheapest first: the seed routes by complexity ("Haiku routes to
# model"), so every seat the citizen has is offered - opus's balanced seat included.
TIERS = ("fast", "balanced", "primary")


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{3,}", text.lower())}


def rank(tools: Mapping[str, Tool], work: str, limit: int) -> list[str]:
    """Deterministic fallback: tools whose name (twice as much) and description share
    most words with the work, then the general working tools, then the rest by name."""
    want = _words(work)

    def score(t: Tool) -> tuple[int, int, str]:
        overlap = 2 * len(want & _words(t.name)) + len(want & _words(t.description))
        return (-overlap, 0 if t.name in WORKING else 1, t.name)

    return [t.name for t in sorted(tools.values(), key=score)[:limit]]


def named(tools: Mapping[str, Tool], work: str) -> list[str]:
    """The tools the work names: its name verbatim, or every word of it ("write a file"
    names write_file), in ranking order."""
    want, text = _words(work), work.lower()
    return [n for n in rank(tools, work, len(tools))
            if n.lower() in text or (_words(n) and _words(n) <= want)]


CATALOGUE = "the whole catalogue (the prefix every citizen's wake shares)"


def offer(llm: Provider, meter: Meter, templates: Templates, tools: Mapping[str, Tool],
          work: str, *, required: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """The tools a loop wake offers, in the catalogue's order; (names, how chosen)."""
    if llm.prompt_cache:
        return list(tools), CATALOGUE
    return select_tools(llm, meter, templates, tools, work, required=required)


def select_tools(llm: Provider, meter: Meter, templates: Templates, tools: Mapping[str, Tool],
                 work: str, *, required: tuple[str, ...] = (),
                 limit: int = SELECT_LIMIT) -> tuple[list[str], str]:
    """Pick up to `limit` tools for the work; returns (names, how they were picked)."""
    required = tuple(r for r in required if r in tools)
    if len(tools) <= limit:
        return list(tools), "all (no more than the limit)"
    schema = templates.schema("tool_select", tools=sorted(tools), max_tools=limit)
    catalogue = "\n".join(f"- {t.name}: {t.description}" for t in tools.values())
    prompt = templates.prompt("tool_select", limit=limit, work=work[:3000], catalogue=catalogue)
    try:
        reply = meter.call(llm, Request(messages=[{"role": "user", "content": prompt}],
                                        output_schema=schema, max_tokens=200, tier="fast",
                                        purpose="select_tools"))
        picked = list(dict.fromkeys(reply.data["tools"]))
        method = "fast model"
    except (ProviderError, StructuredOutputError) as exc:
        picked, method = [], f"ranking (model pick failed: {str(exc)[:120]})"
    if not picked:
        picked = rank(tools, work, limit)
        method = method if method.startswith("ranking") else "ranking (model picked none)"
    # The work's tools first (a model reads the list in order; the old order put the
    # required task tools first and the work's last), the required ones always in, and
    # a tool the work names is never left out by a model that missed it.
    room = max(0, limit - len(required))
    work_tools = [n for n in dict.fromkeys([*named(tools, work), *picked])
                  if n not in required][:room]
    return [*work_tools, *required], method


def route(llm: Provider, meter: Meter, templates: Templates, work: str,
          wake_type: str, *, seats: Collection[str]) -> tuple[str, str]:
    """Choose the model tier among the citizen's council `seats` (its roles); returns
    (tier, how it was chosen)."""
    offered = [t for t in TIERS if t in seats or t == "primary"]  # primary: always a seat
    schema = templates.schema("route", tiers=offered)
    prompt = templates.prompt("route", work=work[:3000], tiers=", ".join(offered))
    try:
        reply = meter.call(llm, Request(messages=[{"role": "user", "content": prompt}],
                                        output_schema=schema, max_tokens=80, tier="fast",
                                        purpose="route"))
        return str(reply.data["tier"]), "fast model"
    except (ProviderError, StructuredOutputError) as exc:
        # The rule: code and debugging need care; everything else starts on primary
        # too, because a wrong cheap answer costs more than the saved tokens.
        return "primary", f"rule for {wake_type} (model route failed: {str(exc)[:120]})"
