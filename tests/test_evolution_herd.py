"""The herd (issue 43): N daemons, one change - only the k drawn reviewers test it.

Eight dev-mode daemons (real processes, woken by their doorbells alone) and a stand-in
Messages API answering what a REVIEW wake asks (`tests/daemons.py:routing`: "worked"
when the test run passed, then adopt). opus announces one change; the broker draws k = 3
reviewers (`shared/draws/<id>.json`); only they are rung and run `code_test`; the report
that verifies it rings the seven who lack it, each asks one question and adopts, and at
2/3 the broker merges it. Counted afterwards: the test runs and who ran them, who called
`code_test` at all and how many at once (the wake logs), the model calls.

A drawn reviewer may run none: when the civilization's bound on working wakes (broker
permits, the CPUs by default) holds its wake back until two reports have verified the
change, its gate offers the adoption alone - which the test checks instead of the run.

On the code before f26b362 (every peer rung, every peer tested) it failed at its first
assertion: 7 test runs for one change - every peer of the eight, all seven at once.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import git
import pytest

from bench.stats import peak
from citizen import config
from citizen.admin import founding
from citizen.tools import sandbox
from shared.evolution import Evolution
from tests.anthropic_server import MessagesServer, text
from tests.daemons import Daemon, cli, daemon_env, routing, start, wait_for
from tests.scripts import events
from tests.test_evolution import APP, TEST, commit

pytestmark = pytest.mark.skipif(sandbox.problem() != "", reason="bubblewrap cannot run here")

HERD = ("opus", "mira", "aria", "nova", "iris", "juno", "leda", "rhea")
K = 3  # the operator's evolution.reviewers, left at its default (shared.change_rules)


def found_herd(civ: Path, rules_dir: Path) -> None:
    """Eight citizens, each with ~/code a clone of a tiny baseline (with a release), and
    the operator's test command: pytest on its one test file."""
    base = config.templates().citizen_data("opus")
    for name in HERD[3:]:  # the templates know three; the others are onboarded as opus's
        founding.init_citizen(name, {**base, "email": f"{name}@example.org"})
    baseline = git.Repo.init(civ / "shared" / "baseline", initial_branch="main")
    with baseline.config_writer() as cw:
        cw.set_value("user", "name", "setup").set_value("user", "email", "setup@x")
    commit(baseline, {"app.py": APP, "tests/test_app.py": TEST}, "baseline")
    baseline.git.update_ref("refs/heads/release", "HEAD")
    command = f"{sys.executable} -m pytest -q -x -p no:cacheprovider tests"
    for name in HERD:
        code = civ / name / "code"
        code.rmdir()
        repo = git.Repo.clone_from(str(baseline.working_dir), code)
        with repo.config_writer() as cw:
            cw.set_value("user", "name", name).set_value("user", "email", f"{name}@x")
        (rules_dir / f"{name}.json").write_text(json.dumps(
            {"evolution": {"test_command": command}}))


def model(body: dict[str, object]) -> dict[str, object]:
    return routing(body, lambda t: t.startswith("code_")) or text("nothing else to do")


def wake_logs(civ: Path, name: str) -> list[Path]:
    """`name`'s wake logs, oldest first (named by the wake's number, zero-padded)."""
    return sorted((civ / name / "logs" / "wakes").glob("*.jsonl"))


def code_tests(civ: Path, name: str) -> list[dict[str, Any]]:
    """The code_test calls in `name`'s wake logs."""
    return [e for log in wake_logs(civ, name) for e in events(log, "tool_call")
            if e["tool"] == "code_test"]


def span(call: dict[str, Any]) -> tuple[float, float]:
    """When a logged tool call ran: its event is written as it returns."""
    end = datetime.fromisoformat(str(call["ts"])).timestamp()
    return end - float(call["duration_s"]), end


def test_one_change_among_eight_daemons_is_tested_by_the_k_drawn_alone(
        civ: Path, rules_dir: Path, messages_api: MessagesServer) -> None:
    found_herd(civ, rules_dir)
    messages_api.responder = model
    env = daemon_env(civ, messages_api)
    # No scheduled wake within the test: every wake is one a doorbell rang.
    daemons: list[Daemon] = [start(env, name, "--interval", "86400", "--first-wake", "86400")
                             for name in HERD]
    evolution = Evolution(civ / "shared", list(HERD), False)
    try:
        beats = civ / "shared" / "monitor" / "heartbeats"
        wait_for(lambda: all((beats / f"{n}.json").exists() for n in HERD), timeout=60)
        commit(git.Repo(civ / "opus" / "code"), {"app.py": APP.replace("'hi'", "'hello'")},
               "warmer greeting")
        cli(env, "tool", "opus", "code_announce", json.dumps({
            "description": "warmer greeting", "expected_outcome": "greet() says hello"}))
        # Merged at 2/3; then every citizen holds it (each adopts when asked).
        wait_for(lambda: len(evolution.changes()[0].holders()) == len(HERD), timeout=150,
                 every=0.2)
    finally:
        for d in daemons:
            d.terminate()
        for d in daemons:
            d.wait(timeout=60)
    (change,) = evolution.changes()
    runs = [json.loads(p.read_text())
            for p in sorted((civ / "shared" / "changes" / change.id / "runs").glob("*.json"))]
    runners = [str(r["author"]) for r in runs]
    assert len(runs) == K, runners  # k runs, not one per peer
    drawn = json.loads((civ / "shared" / "draws" / f"{change.id}.json").read_text())
    first = set(drawn["order"][:K])
    assert drawn["k"] == K and len(set(runners)) == len(runners) and set(runners) <= first
    assert all(r["exit_status"] == 0 for r in runs)
    # Each of the k drawn ran, the third too when two had verified it first: a drawn
    # reviewer's wake goes ahead of the adopters' in the permit queue, so it tests before
    # the merge (citizen.broker.reviews.owes_review).
    assert set(runners) == first
    # Nobody outside the draw even tried: the wake logs show who called code_test.
    tried = {n: code_tests(civ, n) for n in HERD}
    assert {n for n, calls in tried.items() if calls} == set(runners)
    assert peak([span(e) for calls in tried.values() for e in calls]) <= K
    # One question after each test run, and one for each of the N - 1 who lacked it.
    assert len(messages_api.forwarded()) <= K + len(HERD) - 1
    assert change.status == "merged"
    assert "'hello'" in (civ / "shared" / "baseline" / "app.py").read_text()
