"""The Money page: GET /money - dollars per day per citizen and per wake type, the
reservations the broker refused, the cached share of prompt tokens; as tables and as charts
(uPlot, vendored in static/, drawn by static/money.js from each chart's data-chart
attribute: no inline script under the CSP). The facts are `citizen.web.facts.money`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from citizen.web import render
from citizen.web.facts import money
from shared import clock


def chart(title: str, unit: str, points: list[dict[str, Any]], by: str, value: str,
          *, scale: float = 1.0) -> str:
    """One chart's data as JSON for uPlot: every day of the window (epoch seconds, UTC
    midnight) and a series per `by` (a citizen, a wake type) of `value` x `scale` per day,
    null where it had none. Autoescaped into an attribute by the template, parsed by
    static/money.js."""
    last = clock.today()
    days = [(last - timedelta(days=n)).isoformat() for n in range(money.DAYS - 1, -1, -1)]
    names = sorted({str(p[by]) for p in points})
    at = {(str(p["day"]), str(p[by])): p[value] * scale for p in points}
    return json.dumps({
        "title": title, "unit": unit,
        "x": [int(datetime.fromisoformat(d).replace(tzinfo=UTC).timestamp()) for d in days],
        "series": {n: [at.get((d, n)) for d in days] for n in names}})


def facts() -> dict[str, Any]:
    """Every figure of the page, read from the ledgers now."""
    totals = money.by_day_and_citizen()  # read once for both figures made of it
    return {"by_citizen": money.cost_by_citizen(totals=totals),
            "by_type": money.cost_by_wake_type(),
            "cached": money.cached_share(totals=totals), "refused": money.refused(),
            "left_out": money.unreadable()}


async def page(request: Request) -> Response:
    facts_ = await render.facts(facts)
    charts = [
        chart("Dollars per day, by citizen", "$", facts_["by_citizen"], "citizen", "usd"),
        chart("Dollars per day, by wake type", "$", facts_["by_type"], "wake_type", "usd"),
        chart("Cached share of prompt tokens", "%", facts_["cached"], "citizen",
              "cached_share", scale=100.0),
        chart("Reservations refused by the broker", "calls", facts_["refused"]["series"],
              "citizen", "refused"),
    ]
    return render.page(request, "money.html", days=money.DAYS, charts=charts, **facts_)


routes = [Route("/money", page, methods=["GET"])]
