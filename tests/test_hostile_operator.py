"""Attacks a hostile citizen made on the operator's own actions (issue 28): what it
plants in its folders must neither block nor forge a person's decision, nor lead root's
writes out of its home."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from citizen.cli import cli
from citizen.config import paths
from citizen.home.tasks import TaskQueue
from shared.consensus import Consensus
from tests.thoughtworld import HELLO, commons, proposal, vote

CITIZEN_UID = 4242  # a citizen's Unix user, as root sees it (no name needed)


@pytest.fixture
def c(tmp_path: Path) -> Consensus:
    return commons(tmp_path / "shared")


def waiting_for_a_human(c: Consensus) -> str:
    """A high-stakes proposal the council approved: it runs only on a person's word."""
    d = c.request(HELLO, "opus", "operator")
    c.propose(d.id, "opus", proposal(tool="delete_file", path="README.md", content=""))
    c.verify(d.id, d.roles["verifier"], vote())
    assert c.integrate(d.id, d.roles["integrator"], vote()).phase == "human"
    return d.id


def _plant(kind: str, at: Path, tmp_path: Path) -> None:
    if kind == "directory":
        at.mkdir()
        (at / "x").write_text("{}")
    elif kind == "fifo":
        os.mkfifo(at)
    elif kind == "symlink":  # to a decision-looking file of someone the reader trusts
        forged = tmp_path / "forged.json"
        forged.write_text(json.dumps({"operator": "root", "decision": "approve"}))
        at.symlink_to(forged)


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_a_planted_object_neither_forges_nor_blocks_the_veto(
        c: Consensus, tmp_path: Path, kind: str) -> None:
    pid = waiting_for_a_human(c)
    _plant(kind, c.records_dir / pid / "human.json", tmp_path)
    d = c.load(pid)
    assert (d.phase, d.human) == ("human", None)  # nothing planted decides
    d = c.decide_human(pid, "root", "reject", "no")
    assert (d.result, d.phase) == ("rejected", "record")
    assert d.human is not None and d.human["operator"] == "root"
    assert os.path.lexists(c.records_dir / pid / "human.json")  # kept for the operator


def test_approve_works_past_a_planted_directory(c: Consensus, tmp_path: Path) -> None:
    pid = waiting_for_a_human(c)
    _plant("directory", c.records_dir / pid / "human.json", tmp_path)
    assert c.decide_human(pid, "root", "approve", "looked").phase == "execute"


@pytest.mark.skipif(os.geteuid() != 0, reason="root's decision in server mode needs root")
def test_on_a_server_the_opener_can_neither_forge_nor_delete_roots_decision(
        c: Consensus, tmp_path: Path) -> None:
    """The folder is its opener's: a file of its own at human.json is no decision, root
    decides past it, and once root has decided the opener cannot delete the veto."""
    pid = waiting_for_a_human(c)
    folder = c.records_dir / pid
    planted = folder / "human.json"
    planted.write_text(json.dumps({"operator": "root", "decision": "approve"}))
    os.chown(folder, CITIZEN_UID, -1)
    os.chown(planted, CITIZEN_UID, -1)
    c.enforce = True  # server mode for the person's decision (records stay dev-mode)
    assert c.load(pid).human is None
    assert c.decide_human(pid, "root", "reject", "no").result == "rejected"
    assert folder.stat().st_uid == 0
    mine = [p for p in folder.iterdir() if p.name.startswith("human.json~")]
    assert len(mine) == 1 and mine[0].stat().st_uid == 0
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    pid_child = os.fork()
    if pid_child == 0:  # the opener tries to delete root's veto
        code = 0
        try:
            os.setgid(CITIZEN_UID)
            os.setuid(CITIZEN_UID)
            os.unlink(mine[0].name, dir_fd=fd)
        except PermissionError:
            code = 3
        finally:
            os._exit(code)
    os.close(fd)
    _, status = os.waitpid(pid_child, 0)
    assert os.waitstatus_to_exitcode(status) == 3, "the opener deleted root's decision"
    human = c.load(pid).human
    assert human is not None and human["decision"] == "reject"


def test_root_adding_a_task_never_follows_a_planted_link(
        civ: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`citizen task add` (root, on the citizen's behalf): tasks/queue a link elsewhere,
    tasks a link elsewhere, the task's own file name a link - nothing lands outside."""
    home = paths.home("opus")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    queue = home.tasks / "queue"
    queue.rmdir()
    queue.symlink_to(elsewhere)
    out = CliRunner().invoke(cli, ["task", "add", "opus", "hello"])
    assert out.exit_code != 0 and "symbolic link" in out.output, out.output
    assert list(elsewhere.iterdir()) == []
    queue.unlink()
    home.tasks.rename(home.dir / "tasks-real")
    home.tasks.symlink_to(elsewhere)
    out = CliRunner().invoke(cli, ["task", "add", "opus", "hello"])
    assert out.exit_code != 0 and "symbolic link" in out.output, out.output
    assert list(elsewhere.iterdir()) == []
    home.tasks.unlink()
    (home.dir / "tasks-real").rename(home.tasks)
    queue.mkdir()
    target = tmp_path / "target"
    target.write_text("untouched")
    planted = queue / "t-20260101T000000.000000-abcdef.json"
    planted.symlink_to(target)
    with monkeypatch.context() as m:
        m.setattr("citizen.home.tasks.new_id", lambda: planted.stem)
        out = CliRunner().invoke(cli, ["task", "add", "opus", "hello"])
    assert out.exit_code != 0 and "exists already" in out.output, out.output
    assert target.read_text() == "untouched"
    planted.unlink()
    out = CliRunner().invoke(cli, ["task", "add", "opus", "hello"])
    assert out.exit_code == 0, out.output
    tasks = TaskQueue(home.tasks)
    assert [tasks.load("queue", i).text for i in tasks.ids("queue")] == ["hello"]
