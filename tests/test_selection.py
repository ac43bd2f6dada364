"""Tool selection's fallback puts the work's tools first and keeps the required ones."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from citizen import config
from citizen.config import paths
from citizen.errors import ProviderError
from citizen.home.wakelog import WakeLog
from citizen.llm.base import Request
from citizen.llm.scripted import ScriptedProvider
from citizen.tools import core_tools
from citizen.wake.meter import Meter
from citizen.wake.selection import rank, select_tools

WORK = "Write a file notes/hello.md saying hello to mira"
REQUIRED = ("task_progress", "task_complete", "task_stuck")


def test_ranking_puts_the_tool_the_work_names_first() -> None:
    ranked = rank(core_tools(), WORK, 12)
    assert ranked.index("write_file") < 3, ranked


def test_a_failed_pick_still_offers_the_works_tools_before_the_required_ones(
        civ: Path) -> None:
    def broken(request: Request) -> NoReturn:
        raise ProviderError("the fast model is down")

    cfg = config.load_citizen("opus")
    meter = Meter(WakeLog(paths.home("opus"), 1, "TASK"), cfg.budget)
    chosen, how = select_tools(ScriptedProvider(default=broken), meter, config.templates(),
                               core_tools(), WORK, required=REQUIRED)
    assert how.startswith("ranking")
    assert len(chosen) == 12 and set(REQUIRED) <= set(chosen)
    assert chosen.index("write_file") < chosen.index("task_complete")
    assert chosen[:3].count("write_file") == 1


def test_a_tool_the_work_names_is_kept_when_the_model_leaves_it_out(civ: Path) -> None:
    """The model's pick is unioned with the tools the work names: a fast model that
    picks only web_fetch for "write a file" still leaves write_file on offer."""
    from citizen.llm.base import Reply

    def web_only(request: Request) -> Reply:
        return Reply(text="", model="m", provider="scripted", data={"tools": ["web_fetch"]})

    cfg = config.load_citizen("opus")
    meter = Meter(WakeLog(paths.home("opus"), 1, "TASK"), cfg.budget)
    chosen, how = select_tools(ScriptedProvider(default=web_only), meter, config.templates(),
                               core_tools(), WORK, required=REQUIRED)
    assert how == "fast model"
    assert "write_file" in chosen and "web_fetch" in chosen
    assert chosen.index("write_file") < chosen.index("task_complete")


def _route_wake(name: str, tier: str) -> tuple[list[str], str]:
    """Run one task wake of `name` whose router answers `tier`; the execute calls' tiers
    and the route event's model."""
    from citizen.home.tasks import TaskQueue
    from citizen.wake.flow import run_wake
    from tests.scripts import Actor, call, events

    TaskQueue(paths.home(name).tasks).add("Write notes/a.md saying a")
    actor = Actor(call("write_file", path="notes/a.md", content="a"),
                  call("task_complete", summary="notes/a.md says a"), tier=tier)
    result = run_wake(name, wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    routed = events(result.log_path, "route")
    return [r.tier for r in actor.requests if r.purpose == "execute"], routed[0]["route_model"]


def test_routing_uses_the_balanced_seat_of_a_citizen_that_has_one(civ: Path) -> None:
    """The router is offered every seat of the council (the seed: "Haiku routes to
    model" by complexity): opus's balanced seat serves the work it routes there."""
    tiers, model = _route_wake("opus", "balanced")
    assert tiers and set(tiers) == {"balanced"}
    assert model == config.load_citizen("opus").seat("balanced").model != \
        config.load_citizen("opus").seat("primary").model


def test_a_citizen_without_a_balanced_seat_is_not_offered_one(civ: Path) -> None:
    """mira has no balanced seat: the router's schema leaves it out, so a reply naming it
    is refused and the rule (primary) decides."""
    tiers, model = _route_wake("mira", "balanced")
    assert set(tiers) == {"primary"}
    assert model == config.load_citizen("mira").seat("primary").model
