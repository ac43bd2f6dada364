"""The task corpus (bench/tasks.py) with the competent agent behind the Messages API test
server, every call through the real SDK: every task passes its checker and no task is
claimed done that the checker fails. The agent's next step depends on what its tools
returned, so a stale result (an edit not seen, a test re-run answered from a cache), a
refused claim or a lost continuation changes its path."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.tasks import TASKS, run_task
from tests.anthropic_server import MessagesServer


@pytest.fixture(scope="module")
def api() -> Iterator[MessagesServer]:
    server = MessagesServer().start()
    yield server
    server.stop()


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_the_competent_agent_passes_and_never_claims_falsely(
        task: object, api: MessagesServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CIV_ROOT", raising=False)  # run_task makes its own civilization
    out = run_task(task, "api", "", api)  # type: ignore[arg-type]
    if out.skipped:
        pytest.skip(out.skipped)
    assert out.passed, f"{out.name}: {out.why} {out.failures}"
    assert not (out.claimed_done and not out.passed)
    assert out.calls > 0 and out.tokens_in > 0 and out.cost_usd > 0  # metered from the wire
