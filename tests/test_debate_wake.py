"""The DEBATE wake in-process: a turn whose model keeps failing passes after three failed
wakes (the owed-steps fallback), and the next participant's doorbell rings. (Idle gates
cost nothing: the contract suite over every wake type.) From the wt-wakes branch."""

from __future__ import annotations

from pathlib import Path

from citizen import civilization
from citizen.config import paths
from citizen.llm.scripted import ScriptedProvider
from citizen.wake.flow import run_wake
from citizen.wake.types.debate import DebateWake
from tests.scripts import say


def test_a_turn_that_keeps_failing_passes_and_rings_the_next(civ: Path) -> None:
    debates = civilization.debates()
    d = debates.start("Tests before features", ["opus", "mira", "aria"], "operator")
    first = d.owed_by()
    broken = ScriptedProvider(default=lambda request: say("not json at all"))
    tries = DebateWake.spec.max_failures
    for attempt in range(1, tries + 1):
        result = run_wake(first, wake_type="DEBATE", provider=lambda c, s: broken)
        assert result.status == ("provider_error" if attempt < tries else "ok")
        assert debates.load(d.id).seq == d.seq + (attempt == tries)
    after = debates.load(d.id)
    assert after.messages[-1]["move"] == "PASS" and after.messages[-1]["author"] == first
    assert after.messages[-1]["content"].startswith("no move: ")
    nxt = after.owed_by()
    assert nxt and nxt != first  # three participants: the turn moved on
    assert any(p.name.endswith("DEBATE.json") for p in paths.home(nxt).doorbell.iterdir())


def test_dialogue_runs_on_the_fast_model(civ: Path) -> None:
    """The seed: Haiku for dialogue, Sonnet only for crystallization. Every move used to
    run on the primary model (a three-way debate is ≈50 move-wakes)."""
    debates = civilization.debates()
    d = debates.start("Tests before features", ["opus", "mira"], "operator")
    model = ScriptedProvider(default=lambda request: say("not json at all"))
    run_wake(d.owed_by(), wake_type="DEBATE", provider=lambda c, s: model)
    moves = [r for r in model.requests if r.purpose.startswith("debate_")]
    assert moves and {r.tier for r in moves} == {"fast"}
    assert moves[0].purpose == "debate_discovery"


def test_the_crux_lock_runs_on_the_primary_model(civ: Path) -> None:
    """The seed: the primary model crystallizes - the CRUX_LOCK stage, whose commitments
    become the debate's result; dialogue on either side of it stays on the fast one."""
    debates = civilization.debates()
    d = debates.start("Tests before features", ["opus", "mira"], "operator",
                      budgets={"DISCOVERY": (1, 2), "CRUX_LOCK": (6, 8), "EVIDENCE": (12, 16)})
    d = debates.move(d.id, d.owed_by(), {"move": "PROPOSE_QUESTION", "content": "binary",
                                         "question": "Will tests first cut reverts by 2027?"})
    assert d.stage == "CRUX_LOCK"
    model = ScriptedProvider(default=lambda request: say("not json at all"))
    run_wake(d.owed_by(), wake_type="DEBATE", provider=lambda c, s: model)
    moves = [r for r in model.requests if r.purpose.startswith("debate_")]
    assert moves and {r.tier for r in moves} == {"primary"}
    assert moves[0].purpose == "debate_crux_lock"
