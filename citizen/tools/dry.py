"""DRY audit tools and civilization goals (`shared.dry`, `shared.goals`)."""

from __future__ import annotations

import json
from typing import Literal

from citizen import civilization
from citizen.tools.base import ToolEnv, tool
from shared.commons import Commons


def _commons() -> Commons:
    return civilization.commons()


@tool
def dry_violation_report(env: ToolEnv, location: str, description: str, fix: str) -> str:
    """Record a DRY violation or needless complexity you found.

    :param location: file and lines (or the shared document) where it is
    :param description: what is duplicated or too complex; which two values can disagree
    :param fix: the simplest fix
    """
    return _commons().dry.report(env.home.name, location,
                                                             description, fix)


@tool(reads=True, cacheable=True)
def dry_violation_list(env: ToolEnv, status: Literal["open", "fixed", "all"] = "open") -> str:
    """List DRY violations.

    :param status: open, fixed or all
    """
    return json.dumps(_commons().dry.violations(status))


@tool
def dry_violation_fixed(env: ToolEnv, violation_id: str, note: str) -> str:
    """Mark a DRY violation as fixed, saying how (the commit, the change id).

    :param violation_id: the violation's id
    :param note: how it was fixed
    """
    _commons().dry.fixed(env.home.name, violation_id, note)
    return f"{violation_id} marked fixed"


@tool(reads=True, cacheable=True)
def civ_goals_list(env: ToolEnv) -> str:
    """List the civilization's goals with their steps and derived progress."""
    return json.dumps(_commons().goals.all())


@tool
def civ_goal_propose(env: ToolEnv, title: str, steps: str) -> str:
    """Propose a civilization goal.

    :param title: the goal in one line
    :param steps: its steps, one per line
    """
    return _commons().goals.propose(env.home.name, title,
                                                         steps.splitlines())


@tool
def civ_goal_step_done(env: ToolEnv, goal_id: str, step: int, note: str) -> str:
    """Record that you finished one step of a civilization goal.

    :param goal_id: the goal's id
    :param step: the step's number (from 0)
    :param note: what was done
    """
    goal = _commons().goals.step_done(env.home.name, goal_id, step,
                                                           note)
    return f"{goal_id}: progress {goal['progress']}"


COMMONS_TOOLS = (dry_violation_report, dry_violation_list, dry_violation_fixed, civ_goals_list,
                 civ_goal_propose, civ_goal_step_done)
