"""A debate on the embedded local model terminates cleanly - converged, or ended by
its budget or the moderator - within its budget. Asserts the mechanics only."""

from __future__ import annotations

import time
from pathlib import Path

from citizen import civilization, config
from citizen.llm.local import LocalProvider
from citizen.wake.flow import run_wake

BUDGETS = {"DISCOVERY": (1, 2), "CRUX_LOCK": (2, 4), "EVIDENCE": (1, 2)}


def test_a_debate_on_the_embedded_model_ends_within_its_budget(civ: Path) -> None:
    tpl = config.templates()
    llm = LocalProvider(tpl.citizen("opus"), tpl.local, tpl.prices)
    debates = civilization.debates()
    d = debates.start("Citizens should write tests before features", ["opus", "mira"],
                      "operator", budgets=BUDGETS)
    most = sum(hi for _, hi in BUDGETS.values())
    started, wakes, calls = time.monotonic(), 0, 0
    while d.active:
        assert wakes < most * 3, f"no end after {wakes} wakes"
        result = run_wake(d.owed_by(), wake_type="DEBATE", provider=lambda c, s: llm)
        assert result.status in ("ok", "provider_error"), result
        wakes, calls = wakes + 1, calls + result.calls
        d = debates.load(d.id)
    print(f"\nlocal debate: {d.stage} ({d.ended or 'converged'}) after {d.seq} moves, "
          f"{wakes} wakes, {calls} model calls, {time.monotonic() - started:.0f} s")
    assert d.stage in ("CONVERGED", "ENDED")
    assert d.seq <= most and calls <= 2 * most  # a refused move is retried once, then PASS
    crux = debates.result(d.id)
    assert crux is not None and crux["validated"] is (not crux["failed_checks"])
    if d.stage == "ENDED":  # by its budget or the lock gate, saying why: nothing validated
        assert d.ended and not crux["validated"]
    assert (debates.dir / d.id / "transcript.md").read_text().startswith("# Debate")
