"""First-wake orientation (the seed's bootstrap, "first-wake discovery"): the first wake
that runs the tool loop tells the citizen what it is, its peers, its tools and where
things are - once, remembered in the home's state; a wake that dies before its loop ends
leaves no mark, so the next one orients again."""

from __future__ import annotations

from pathlib import Path

from citizen.config import paths
from citizen.home import state
from citizen.home.tasks import TaskQueue
from citizen.llm.base import Reply, Request
from citizen.wake import bootstrap
from citizen.wake.flow import run_wake
from tests.scripts import Actor, call

HEADER = "an orientation, shown once"


def task_wake(note: str, actor: Actor) -> str:
    TaskQueue(paths.home("opus").tasks).add(f"Write notes/{note}.md saying {note}")
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    return result.status


def writer(note: str) -> Actor:
    return Actor(call("write_file", path=f"notes/{note}.md", content=note),
                 call("task_complete", summary=f"notes/{note}.md says {note}"))


def systems(actor: Actor) -> list[str]:
    return [r.system[1] for r in actor.requests if r.purpose == "execute"]  # the citizen's


def test_the_first_wake_orients_the_citizen_and_no_later_one_does(civ: Path) -> None:
    first = writer("a")
    assert task_wake("a", first) == "ok"
    shown = systems(first)
    assert shown and all(HEADER in s for s in shown)  # every call of that wake: one prefix
    home = paths.home("opus")
    for fact in ("Your peers: aria, mira.", "write_file", str(home.code), str(home.contexts),
                 str(paths.commons_layout().root)):
        assert fact in shown[0], fact
    number = state.load(home)["marks"][bootstrap.MARK]
    second = writer("b")
    assert task_wake("b", second) == "ok"
    assert systems(second) and not any(HEADER in s for s in systems(second))
    assert state.load(home)["marks"][bootstrap.MARK] == number  # still the first wake's


def test_a_wake_that_dies_before_its_loop_ends_leaves_the_orientation_due(civ: Path) -> None:
    crashing = writer("a")
    answer = crashing.default

    def dies(request: Request) -> Reply:  # mid-loop, after the model saw it: like a kill
        if request.purpose == "execute":
            raise RuntimeError("the process died here")
        assert callable(answer)
        return answer(request)

    crashing.default = dies
    assert task_wake("a", crashing) == "failed"
    assert systems(crashing) and HEADER in systems(crashing)[0]
    assert bootstrap.MARK not in state.load(paths.home("opus"))["marks"]
    again = writer("b")
    assert task_wake("b", again) == "ok"
    assert systems(again) and HEADER in systems(again)[0]
    assert bootstrap.MARK in state.load(paths.home("opus"))["marks"]
