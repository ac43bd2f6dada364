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
