"""Self-directed CODE slots (issue 30, item 1): with no task, a CODE, DEBUG or RESEARCH
slot may improve the citizen's own code toward its goals - at most the operator's number
a day (`budget.max_self_directed_wakes_per_day`, default 1), counted across wakes and
reset by the day; beyond it, and with no goals, the slot is idle: no model call, $0.00."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import git
import pytest

from citizen import config
from citizen.config import paths
from citizen.home.contexts import ContextStore
from citizen.wake.flow import WakeResult, run_wake
from shared.clock import CLOCK_ENV
from tests.scripts import Actor, call, queue, say

GOAL = "make greet() answer in the caller's language"


def never(*_: object) -> Actor:
    raise AssertionError("an idle wake built a model")


@pytest.fixture
def opus(civ: Path) -> Path:
    """opus with a ~/code repository and one open goal (and one completed)."""
    code = paths.home("opus").code
    repo = git.Repo.init(code, initial_branch="main")
    (code / "app.py").write_text("def greet():\n    return 'hi'\n")
    repo.index.add(["app.py"])
    repo.index.commit("first")
    store = ContextStore(paths.home("opus").contexts, config.load_citizen("opus").context_limits,
                         len)
    goals = store.load("goals")
    goals.add(GOAL)
    goals.add("write a README", status="completed")
    store.save_all({"goals": goals})
    return code


def wake(kind: str = "CODE", agent: Actor | None = None) -> WakeResult:
    return run_wake("opus", wake_type=kind,
                    provider=(lambda c, s: agent) if agent is not None else never)


def next_day(monkeypatch: pytest.MonkeyPatch, days: int) -> None:
    now = time.time()
    monkeypatch.setenv(CLOCK_ENV, f"{now + days * 86400},{now},1")


def test_an_empty_queue_runs_one_self_directed_wake_a_day_toward_the_goals(
        opus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = Actor(say("nothing worth changing today"))
    first = wake("CODE", agent)
    assert first.status == "ok" and first.calls > 0
    prompt = str(agent.requests[-1].messages[0]["content"])
    assert GOAL in prompt and "write a README" not in prompt  # open goals only
    assert prompt.startswith("This is a CODE wake.") and str(opus) in prompt
    for kind in ("CODE", "DEBUG", "RESEARCH"):  # one count for the three kinds
        idle = wake(kind)
        assert (idle.status, idle.calls, idle.cost_usd) == ("idle", 0, 0.0)
        assert "1 of 1 self-directed wakes" in idle.reason
    assert wake("TASK").status == "idle"  # plain TASK slots never self-direct
    next_day(monkeypatch, 1)  # the rollover: a new day's count
    assert wake("DEBUG", Actor(say("fine"))).status == "ok"
    assert wake("CODE").status == "idle"
    store = ContextStore(paths.home("opus").contexts, config.load_citizen("opus").context_limits,
                         len)
    goals = store.load("goals")
    goals.entries[0]["status"] = "completed"
    store.save_all({"goals": goals})
    next_day(monkeypatch, 2)
    idle = wake("CODE")  # nowhere to go: no open goal
    assert idle.status == "idle" and "no open goals" in idle.reason


def test_a_queued_task_comes_first_and_uses_no_self_directed_wake(opus: Path) -> None:
    task = queue().add("Say hello")
    assert wake("CODE", Actor(call("task_complete", summary="said hello"))).status == "ok"
    assert queue().ids("done") == [task.id]
    assert wake("CODE", Actor(say("nothing to change"))).status == "ok"  # the day's one


def test_the_operator_sets_the_number(opus: Path, rules_dir: Path) -> None:
    (rules_dir / "opus.json").write_text(json.dumps(
        {"budget": {"max_self_directed_wakes_per_day": 2}}))
    assert [wake("CODE", Actor(say("done"))).status for _ in range(2)] == ["ok", "ok"]
    assert wake("CODE").status == "idle"
    (rules_dir / "opus.json").write_text(json.dumps(
        {"budget": {"max_self_directed_wakes_per_day": 0}}))
    state = json.loads(paths.home("opus").state.read_text())
    state["marks"].pop("self_directed")  # even with a fresh count
    paths.home("opus").state.write_text(json.dumps(state))
    assert wake("CODE").status == "idle"


def test_a_citizen_cannot_raise_the_number_through_its_own_files(
        opus: Path, rules_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: raise the cap in one's own config.json and in ~/code/templates."""
    paths.citizen_config_file("opus").write_text(json.dumps(
        {"budget": {"max_self_directed_wakes_per_day": 50}}))
    code_tpl, release = tmp_path / "code-templates", tmp_path / "release-templates"
    shutil.copytree(paths.templates_dir(), code_tpl)
    shutil.copytree(paths.templates_dir(), release)
    configs = json.loads((code_tpl / "citizen_configs.json").read_text())
    configs["defaults"]["budget"]["max_self_directed_wakes_per_day"] = 50
    (code_tpl / "citizen_configs.json").write_text(json.dumps(configs))
    monkeypatch.setenv("EXPERIENCE_TEMPLATES", str(code_tpl))
    monkeypatch.setenv("EXPERIENCE_RULES_DIR", str(release))  # the unit's, on a server
    monkeypatch.setattr(config.loading, "_commons_owned", lambda _shared: True)  # server mode
    assert config.load_citizen("opus").budget.max_self_directed_wakes_per_day == 1
    assert wake("CODE", Actor(say("done"))).status == "ok"
    assert wake("CODE").status == "idle"
