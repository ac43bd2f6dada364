"""The Money page's facts, as series a chart draws: dollars per day per citizen and per
wake type, and the cached share of prompt tokens (every citizen's spend ledger - the
source of `citizen cost`), and the reservations the broker refused (its ledger - the
source of `citizen spend`). Read on every call; nothing cached. Each citizen's ledgers
are summed by themselves: a ledger whose lines are no ledger's (a citizen wrote them)
leaves that citizen out, named in `unreadable()`, and the page stands.
"""

from __future__ import annotations

from typing import Any

from citizen import civilization
from citizen.broker import views
from citizen.config import paths
from citizen.home import spend

DAYS = views.DAYS  # the page's default window, today included


def _homes() -> list[paths.Home]:
    return [paths.home(name) for name in civilization.citizens()]


# Citizen -> why its ledgers were left out, from the last `_totals` (the page reads it
# right after; one dashboard process, pages read in turn or the same answer twice).
_LEFT_OUT: dict[str, str] = {}


def _totals(days: int, by: tuple[str, ...]) -> list[dict[str, Any]]:
    """`spend.totals` citizen by citizen, leaving out one whose lines break it."""
    rows: list[dict[str, Any]] = []
    for home in _homes():
        try:
            rows.extend(spend.totals([home], days, by if "citizen" in by else ("citizen", *by)))
        # A line a citizen wrote that is no ledger line ({"tokens_in": "x"}, a list):
        # its own money is unknown, not everyone's page.
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            _LEFT_OUT[home.name] = f"{type(exc).__name__}: {exc}"
        else:
            _LEFT_OUT.pop(home.name, None)
    if "citizen" in by:
        return rows
    merged: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in rows:  # summed over citizens, as one `spend.totals` over them all would be
        key = tuple(str(r[b]) for b in by)
        into = merged.setdefault(key, {**{b: r[b] for b in by}, "usd": 0.0, "calls": 0})
        into["usd"] = round(into["usd"] + r["usd"], 6)
        into["calls"] += r["calls"]
    return [merged[k] for k in sorted(merged)]


def unreadable() -> dict[str, str]:
    """The citizens whose ledgers the last figures left out, and why."""
    return dict(_LEFT_OUT)


def by_day_and_citizen(days: int = DAYS) -> list[dict[str, Any]]:
    """The ledgers' totals per day and citizen: what `cost_by_citizen` and `cached_share`
    show (read once when a page shows both)."""
    return sorted(_totals(days, ("day", "citizen")), key=lambda r: (r["day"], r["citizen"]))


def cost_by_citizen(days: int = DAYS, totals: list[dict[str, Any]] | None = None,
                    ) -> list[dict[str, Any]]:
    """[{day, citizen, usd, calls}] - one point per citizen and day with a model call."""
    return [{k: r[k] for k in ("day", "citizen", "usd", "calls")}
            for r in (by_day_and_citizen(days) if totals is None else totals)]


def cost_by_wake_type(days: int = DAYS) -> list[dict[str, Any]]:
    """[{day, wake_type, usd, calls}] - memory roll-ups and `citizen ask` are types too."""
    return [{k: r[k] for k in ("day", "wake_type", "usd", "calls")}
            for r in _totals(days, ("day", "wake_type"))]


def cached_share(days: int = DAYS, totals: list[dict[str, Any]] | None = None,
                 ) -> list[dict[str, Any]]:
    """[{day, citizen, prompt_tokens, cache_read, cached_share}]: how much of what was sent
    the provider read from its cache (the figure that should rise as prompts settle)."""
    return [{"day": r["day"], "citizen": r["citizen"],
             "prompt_tokens": r["tokens_in"] + r["cache_read"] + r["cache_write"],
             "cache_read": r["cache_read"], "cached_share": r["cached_share"]}
            for r in (by_day_and_citizen(days) if totals is None else totals)]


def refused(days: int = DAYS) -> dict[str, Any]:
    """The calls the broker refused because their worst case did not fit a cap:
    {"series": [{day, citizen, refused, usd}], "truncated", "unreadable": error or None}
    - `usd` is what the refused reservations asked for. The ledger is the broker's (0700
    on a server: asked of the broker, citizen.broker.views); a ledger that could not be
    read is said, never shown as no refusals."""
    try:
        found = views.read("refused", days=days)
    except views.Unreadable as exc:
        return {"series": [], "truncated": False, "unreadable": str(exc)}
    return {"series": found["series"], "truncated": found["truncated"], "unreadable": None}
