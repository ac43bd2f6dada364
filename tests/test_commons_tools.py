"""DRY violations and civilization goals: records, derived status and progress; DRY_AUDIT gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import git
import pytest

from citizen.tools import core_tools
from citizen.wake.flow import run_wake
from shared.errors import Invalid, NotFound
from tests.scripts import Actor, call, tool_env


def run(name: str, tool_name: str, **args: object) -> str:
    return core_tools()[tool_name].run(tool_env(name), dict(args))


def test_dry_violations_open_and_fixed(civ: Path) -> None:
    vid = run("mira", "dry_violation_report", location="citizen/a.py:10-30",
              description="the same parser twice", fix="call one parser")
    (open_,) = json.loads(run("opus", "dry_violation_list"))
    assert open_["id"] == vid and open_["author"] == "mira" and open_["status"] == "open"
    assert run("opus", "dry_violation_fixed", violation_id=vid, note="change opus-1") \
        == f"{vid} marked fixed"
    assert json.loads(run("opus", "dry_violation_list")) == []
    assert json.loads(run("opus", "dry_violation_list", status="fixed"))[0]["fixed_by"] == ["opus"]
    with pytest.raises(NotFound, match="no violation"):
        run("opus", "dry_violation_fixed", violation_id="dry-nope", note="x")


def test_goal_progress_is_derived_from_done_steps(civ: Path) -> None:
    gid = run("aria", "civ_goal_propose", title="A shared style guide",
              steps="collect examples\nwrite the guide\nreview it")
    assert run("opus", "civ_goal_step_done", goal_id=gid, step=0, note="done") == \
        f"{gid}: progress 1/3"
    assert run("mira", "civ_goal_step_done", goal_id=gid, step=0, note="also") == \
        f"{gid}: progress 1/3"  # the same step twice is still one step
    (goal,) = json.loads(run("mira", "civ_goals_list"))
    assert goal["progress"] == "1/3" and goal["done_steps"] == [0]
    with pytest.raises(Invalid, match="steps 0 to 2"):
        run("mira", "civ_goal_step_done", goal_id=gid, step=7, note="x")
    with pytest.raises(Invalid, match="at least one step"):
        run("mira", "civ_goal_propose", title="empty", steps="\n \n")


def never(*_: object) -> NoReturn:
    raise AssertionError("an idle wake must not build a provider")


def test_dry_audit_runs_once_per_code_change(civ: Path) -> None:
    assert run_wake("opus", wake_type="DRY_AUDIT", provider=never).status == "idle"  # no repo
    code = civ / "opus" / "code"
    repo = git.Repo.init(code)
    (code / "a.py").write_text("x = 1\n")
    repo.index.add(["a.py"])
    repo.index.commit("one", author=git.Actor("opus", "o@x"), committer=git.Actor("opus", "o@x"))
    actor = Actor(call("dry_violation_list", status="open"))
    assert run_wake("opus", wake_type="DRY_AUDIT", provider=lambda c, s: actor).status == "ok"
    assert run_wake("opus", wake_type="DRY_AUDIT", provider=never).status == "idle"
