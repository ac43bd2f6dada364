"""DRY audit tools and civilization goals (`shared.dry`, `shared.goals`)."""

from __future__ import annotations

import json
from typing import Literal

from citizen import paths
from citizen.tools.base import ToolEnv, tool
from shared.dry import DryTracker
from shared.goals import Goals
from shared.identity import server_mode


def _enforce() -> bool:
    return server_mode(paths.shared_dir())


@tool
def dry_violation_report(env: ToolEnv, location: str, description: str, fix: str) -> str:
    """Record a DRY violation or needless complexity you found.

    :param location: file and lines (or the shared document) where it is
    :param description: what is duplicated or too complex; which two values can disagree
    :param fix: the simplest fix
    """
    return DryTracker(paths.shared_dir(), _enforce()).report(env.home.name, location,
                                                             description, fix)


@tool
def dry_violation_list(env: ToolEnv, status: Literal["open", "fixed", "all"] = "open") -> str:
    """List DRY violations.

    :param status: open, fixed or all
    """
    return json.dumps(DryTracker(paths.shared_dir(), _enforce()).violations(status))


@tool
def dry_violation_fixed(env: ToolEnv, violation_id: str, note: str) -> str:
    """Mark a DRY violation as fixed, saying how (the commit, the change id).

    :param violation_id: the violation's id
    :param note: how it was fixed
    """
    DryTracker(paths.shared_dir(), _enforce()).fixed(env.home.name, violation_id, note)
    return f"{violation_id} marked fixed"


@tool
def civ_goals_list(env: ToolEnv) -> str:
    """List the civilization's goals with their steps and derived progress."""
    return json.dumps(Goals(paths.shared_dir(), _enforce()).all())


@tool
def civ_goal_propose(env: ToolEnv, title: str, steps: str) -> str:
    """Propose a civilization goal.

    :param title: the goal in one line
    :param steps: its steps, one per line
    """
    return Goals(paths.shared_dir(), _enforce()).propose(env.home.name, title,
                                                         steps.splitlines())


@tool
def civ_goal_step_done(env: ToolEnv, goal_id: str, step: int, note: str) -> str:
    """Record that you finished one step of a civilization goal.

    :param goal_id: the goal's id
    :param step: the step's number (from 0)
    :param note: what was done
    """
    goal = Goals(paths.shared_dir(), _enforce()).step_done(env.home.name, goal_id, step,
                                                           note)
    return f"{goal_id}: progress {goal['progress']}"


COMMONS_TOOLS = (dry_violation_report, dry_violation_list, dry_violation_fixed, civ_goals_list,
                 civ_goal_propose, civ_goal_step_done)
