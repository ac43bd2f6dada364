"""The task corpus (bench/tasks.py) with the scripted competent agent: every task passes
its checker and no task is claimed done that the checker fails. The agent's next step
depends on what its tools returned, so a stale result (an edit not seen, a test re-run
answered from a cache), a refused claim or a lost continuation changes its path."""

from __future__ import annotations

import pytest

from bench.tasks import TASKS, run_task


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_the_competent_agent_passes_and_never_claims_falsely(task: object,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    monkeypatch.delenv("CIV_ROOT", raising=False)  # run_task makes its own civilization
    out = run_task(task, "scripted", "")  # type: ignore[arg-type]
    assert out.passed, f"{out.name}: {out.why} {out.failures}"
    assert not (out.claimed_done and not out.passed)
