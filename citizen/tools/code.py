"""Code evolution tools (Experience v2 §Change Tools), over `shared.evolution`."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from citizen import civilization
from citizen.config import CitizenConfig, paths
from citizen.home import reviewing
from citizen.tools import sandbox
from citizen.tools.base import ToolEnv, ToolFailure, clip, tool
from citizen.tools.shell import scrubbed_env
from shared import clock, gitsafe
from shared.evolution import Evolution, divergence

TEST_TIMEOUT_S = 900
# What "test it" runs in a scratch worktree of the change: the project's own tests,
# without the slow integration suites (containers, mail servers, the model).
# The daemon's own interpreter, by path: a server has no `python` on the unit's PATH
# (Debian ships python3 only; the venv is not on it), and every review failed with 127.
TEST_COMMAND = (f"{shlex.quote(sys.executable)} -m pytest -q -x -m 'not model' "
                "--ignore=tests/server_install --ignore=tests/test_mail.py "
                "--ignore=tests/test_crash.py")


def test_command(cfg: CitizenConfig) -> str:
    """What "test it" runs on a peer's change: the operator's `evolution.test_command`
    (its rules file; never the citizen's own), else the project's suite."""
    return cfg.evolution.test_command.strip() or TEST_COMMAND


def evolution() -> Evolution:
    return civilization.commons().evolution


def _run(step: object) -> str:
    return json.dumps(step() if callable(step) else step, default=str)


REVIEW_WAKE = "REVIEW"  # the wake that tests, reports, adopts (citizen.wake.types.review)


def _ring(me: str, whom: Iterable[str], reason: str) -> None:
    """Ring each of `whom` for a REVIEW wake. Any citizen may ring any other: the wake's
    gate opens only on work the records show, and the daemon rate-limits rings."""
    commons = civilization.commons()
    for citizen in sorted(whom):
        commons.ring(citizen, REVIEW_WAKE, reason, sender=me)


# An announced change is code peers test and may adopt: only if the operator grants it.
@tool(permission="can_modify_shared_code")
def code_announce(env: ToolEnv, description: str, expected_outcome: str) -> str:
    """Announce the change you committed last in your code, so peers test and may adopt it.

    :param description: what the change does and why
    :param expected_outcome: a falsifiable prediction of what it improves
    """
    me = env.home.name
    change = evolution().announce(me, env.home.code, description, expected_outcome)
    # The reviewers the broker drew, not every peer: the work of a change is k test runs
    # whatever the headcount (a silent one is replaced later, citizen.home.reviewing).
    _ring(me, change.reviewers, f"{me} announced change {change.id}")
    reviewing.remember(env.home, change.id, change.reviewers)
    return _run(change.summary())


@tool
def code_report_outcome(env: ToolEnv, change_id: str,
                        outcome: Literal["worked", "failed", "unclear"], note: str) -> str:
    """Report whether a change worked for you (two matching peer reports verify it).
    "worked" and "failed" rest on your last code_test of the change: its exit status
    must agree (passed: worked; failed: failed); without a run, report "unclear".

    :param change_id: the change, as listed by code_pending_reviews
    :param outcome: worked, failed or unclear
    :param note: the evidence: what you ran and what you saw
    """
    me, evo = env.home.name, evolution()
    before = evo.get(change_id).status
    change = evo.report(change_id, me, outcome, note, run_required=True)
    if change.status == "verified_good" and before != "verified_good":  # this report verified it
        # Everyone who lacks it decides now whether to adopt - the reporter too, in a wake
        # of its own (this one was for testing).
        _ring(me, set(evo.citizens) - change.holders(), f"change {change_id} is verified")
    return _run(change.summary())


@tool(reads=True, cacheable=True)
def code_pending_reviews(env: ToolEnv) -> str:
    """List peers' changes waiting for your test and report."""
    return _run(lambda: [c.summary() for c in evolution().pending_reviews(env.home.name)])


@tool(reads=True, cacheable=True)
def code_verified_good(env: ToolEnv) -> str:
    """List the changes verified to work, which you may adopt."""
    return _run(lambda: [c.summary() for c in evolution().verified_good()])


@tool
def code_test(env: ToolEnv, change_id: str) -> str:
    """Run the project's tests on a peer's change in a scratch worktree; returns the result
    (and files a record of the run in the commons, which your report will cite).

    :param change_id: the change to test
    """
    refused = sandbox.refusal()
    if refused:
        raise ToolFailure(refused)
    evo = evolution()
    change = evo.get(change_id)
    if env.home.name not in change.reviewers:
        # Why: a test run is minutes of CPU; k drawn reviewers run it, not the crowd.
        raise ToolFailure(
            f"you are not one of the reviewers drawn for {change_id} "
            f"({', '.join(change.reviewers) or 'none drawn yet'}); once they verify it you "
            "are asked to adopt or hold out (code_verified_good)")
    evo.fetch(change, env.home.code)
    with tempfile.TemporaryDirectory(prefix=f"review-{change_id}-") as scratch:
        tree = Path(scratch) / "tree"
        # The change's files through a private index, by a git in the reviewer's own
        # repository (gitsafe): no linked worktree whose `.git` pointer the peer's code
        # could rewrite before a later git call reads it.
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        gitsafe.run(env.home.code, "read-tree", change.commit, extra_env=index)
        gitsafe.run(env.home.code, "checkout-index", "--all", f"--prefix={tree}/",
                    extra_env=index)
        # A peer's code (its tests, a conftest.py) runs here: in the reviewer's sandbox for
        # peer code, which may write only the scratch tree and sees the reviewer's home
        # read-only without its secrets (never its ~/code, which its daemon imports, nor
        # a dotfile its git reads), and neither the commons nor the network - reviewing
        # must not hand over the reviewer.
        command = test_command(env.config)
        argv = sandbox.wrap(env.home, ["bash", "-c", command],
                            trust=sandbox.Trust.PEER,
                            binds=(Path(scratch),), chdir=tree,
                            limits=sandbox.Limits(cpu_s=TEST_TIMEOUT_S))
        started = clock.moment().isoformat(timespec="seconds")
        try:
            result = subprocess.run(argv, cwd=tree, capture_output=True,
                                    text=True, timeout=TEST_TIMEOUT_S, check=False,
                                    env={**scrubbed_env(str(env.home.dir)),
                                         "PYTHONPATH": str(tree)})
        except subprocess.TimeoutExpired as exc:
            # A run that never finished is on record too; it backs no verdict.
            evo.record_run(change_id, env.home.name, command, None, started)
            raise ToolFailure(f"the tests ran past {TEST_TIMEOUT_S} s") from exc
    # The run writes its own record (this process is the reviewer: the file is its own),
    # so a report can rest on it and the broker can re-derive the verdict from it.
    run = evo.record_run(change_id, env.home.name, command, result.returncode, started)
    verdict = "passed" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
    return clip(f"tests {verdict} on {change.commit[:12]} (run {run})\n"
                f"{result.stdout[-3000:]}{result.stderr[-1000:]}", 4000)


# Adopting changes the code this citizen's own daemon runs: only if the operator grants it.
@tool(permission="can_modify_shared_code")
def code_adopt(env: ToolEnv, change_id: str) -> str:
    """Adopt a verified-good change into your code (cherry-pick; aborted cleanly on conflict).

    :param change_id: the change to adopt
    """
    return _run(lambda: evolution().adopt(change_id, env.home.name, env.home.code).summary())


@tool
def code_decline(env: ToolEnv, change_id: str, reason: str) -> str:
    """Hold out from a change: record that you will not adopt it, and why (peers see it).

    :param change_id: the change you decline
    :param reason: why you hold out (what it would break or cost you)
    """
    return _run(lambda: evolution().decline(change_id, env.home.name, reason).summary())


@tool(reads=True, cacheable=True)
def code_my_divergence(env: ToolEnv) -> str:
    """List the files in which your code differs from the baseline."""
    return _run(lambda: divergence(env.home.code, paths.commons_layout().baseline))


@tool(reads=True, cacheable=True)
def code_list_changes(env: ToolEnv, citizen: str) -> str:
    """List the files in which a peer's code differs from the baseline.

    :param citizen: the peer's name
    """
    # Read as data by a git in the caller's own repository: never a git in the peer's.
    return _run(lambda: divergence(paths.home(citizen).code, paths.commons_layout().baseline,
                                   reader=env.home.code))


@tool(reads=True, cacheable=True)
def code_status(env: ToolEnv) -> str:
    """Adoption rates of every change, and what is still pending."""
    return _run(lambda: evolution().status())


CODE_TOOLS = (code_announce, code_report_outcome, code_pending_reviews, code_verified_good,
              code_test, code_adopt, code_decline, code_my_divergence, code_list_changes,
              code_status)
