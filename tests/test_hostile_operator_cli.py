"""A hostile citizen against the operator's commands of issue 31: `citizen task
show|list|cancel|retry`, `citizen logs` (table, --wake, --follow) and
scripts/remove_citizen.sh run as root over files the citizen writes. What it plants in
its tasks/ and logs/ must not make root read a file the citizen cannot, hang, eat
unbounded memory, write or chown outside what is the citizen's, or print a line that
runs something else when pasted."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from citizen.cli import cli
from citizen.config import paths
from citizen.home import wakelog
from citizen.home.tasks import TaskQueue

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the attack is on root's commands")
TID = "t-20260101T000000.000000-abcdef"
MARK = "ROOT-ONLY-4f1c"  # what only root may read
REPO = Path(__file__).resolve().parent.parent


def _run(civ: Path, *args: str, timeout: float = 30.0,
         mem: int | None = None) -> subprocess.CompletedProcess[str]:
    """`citizen ARGS` as root in a process of its own: a hang is a timeout, not a stuck
    test run; `mem` caps its address space (a read of everything fails, not the box)."""
    def limit() -> None:
        if mem is not None:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    env = {**os.environ, "CIV_ROOT": str(civ), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "citizen", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, preexec_fn=limit, check=False)


def _root_only_file(tmp_path: Path, text: str) -> Path:
    """A file only root may read, shaped as what the reader expects."""
    secret = tmp_path / "root-only" / "secret.json"
    secret.parent.mkdir(mode=0o700)
    secret.write_text(text)
    secret.chmod(0o600)
    return secret


# -- citizen task show / list -----------------------------------------------------------


@ROOT_ONLY
def test_task_show_never_reads_a_file_through_a_planted_link(civ: Path, tmp_path: Path) -> None:
    """queue/<id>.json a link to a root-only file shaped as a task: root's `task show` and
    `task list` print nothing of it."""
    secret = _root_only_file(tmp_path, json.dumps({"schema_version": 1, "id": TID,
                                                   "text": MARK}))
    (paths.home("opus").tasks / "queue" / f"{TID}.json").symlink_to(secret)
    for args in (("task", "show", "opus", TID), ("task", "list", "opus"),
                 ("task", "list", "opus", "--json")):
        out = CliRunner().invoke(cli, list(args))
        assert MARK not in out.output, (args, out.output)


@ROOT_ONLY
def test_task_show_and_list_do_not_hang_on_a_planted_fifo(civ: Path) -> None:
    os.mkfifo(paths.home("opus").tasks / "queue" / f"{TID}.json")
    for args in (("task", "show", "opus", TID), ("task", "list", "opus")):
        try:
            out = _run(civ, *args, timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"citizen {' '.join(args)} hangs on a FIFO planted as a task")
        assert "Traceback" not in out.stderr, out.stderr


@ROOT_ONLY
def test_task_show_reads_a_bounded_amount_of_a_huge_task_file(civ: Path) -> None:
    """A 4 GB (sparse) task file: root reads a bounded prefix and reports it, it does not
    read it all into memory."""
    with (paths.home("opus").tasks / "queue" / f"{TID}.json").open("wb") as fh:
        fh.truncate(4 * 2**30)
    out = _run(civ, "task", "show", "opus", TID, mem=1536 * 2**20)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "not valid JSON" in out.stderr or "not JSON" in out.stderr, out.stderr


def test_a_task_id_from_a_file_name_is_pasteable_as_printed(civ: Path, tmp_path: Path) -> None:
    """The ID column is what an operator pastes into `citizen task show NAME ID`: a name
    the citizen chose with `$(...)` in it must paste as one literal argument."""
    hostile = "t-$(echo${IFS}pwned>pwned)"
    queue = paths.home("opus").tasks / "queue"
    (queue / f"{hostile}.json").write_text(json.dumps({"schema_version": 1, "id": hostile,
                                                        "text": "hello"}))
    out = CliRunner().invoke(cli, ["task", "list", "opus"])
    assert out.exit_code == 0, out.output
    row = next(line for line in out.output.splitlines() if "pwned" in line)
    printed = re.split(r"\s{2,}", row)[1]  # the ID column, as an operator copies it
    shell = subprocess.run(["bash", "-c", f"printf %s {printed}"], cwd=tmp_path,
                           capture_output=True, text=True, check=False)
    assert not (tmp_path / "pwned").exists(), f"pasting the ID ran a command: {row!r}"
    assert shell.stdout == hostile


# -- citizen task cancel / retry --------------------------------------------------------


@ROOT_ONLY
def test_cancel_and_retry_write_nothing_through_planted_links(civ: Path, tmp_path: Path) -> None:
    """tasks/cancelled and tasks/cancel links to elsewhere, the task file a link: root's
    cancel and retry refuse, and nothing lands outside the home or changes owner there."""
    tasks = TaskQueue(paths.home("opus").tasks)
    queued = tasks.add("hello")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    tasks.dir("cancelled").rmdir()
    tasks.dir("cancelled").symlink_to(elsewhere)
    out = CliRunner().invoke(cli, ["task", "cancel", "opus", queued.id])
    assert out.exit_code == 1 and "symbolic link" in out.output, out.output
    assert list(elsewhere.iterdir()) == [] and tasks.where(queued.id) == "queue"
    tasks.dir("cancelled").unlink()
    tasks.dir("cancelled").mkdir()
    target = _root_only_file(tmp_path, json.dumps({"schema_version": 1, "id": TID,
                                                   "text": "x", "status": "failed"}))
    (tasks.dir("failed") / f"{TID}.json").symlink_to(target)
    out = CliRunner().invoke(cli, ["task", "retry", "opus", TID])
    assert out.exit_code == 1, out.output
    assert target.stat().st_uid == 0 and "retried" not in target.read_text()
    assert (tasks.dir("failed") / f"{TID}.json").is_symlink()


# -- citizen logs ---------------------------------------------------------------------


def _log(civ: Path, number: int = 1) -> Path:
    logs = paths.home("opus").wake_logs
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"{number:06d}-TASK.jsonl"


@ROOT_ONLY
def test_logs_never_read_a_file_through_a_planted_link(civ: Path, tmp_path: Path) -> None:
    secret = _root_only_file(tmp_path, json.dumps({"event": "wake_start", "ts": MARK,
                                                   "reason": MARK}) + "\n")
    _log(civ).symlink_to(secret)
    for args in (("logs", "opus"), ("logs", "opus", "--wake", "1"),
                 ("logs", "opus", "--json")):
        out = CliRunner().invoke(cli, list(args))
        assert MARK not in out.output, (args, out.output)


def test_a_planted_log_name_stops_neither_status_nor_logs(civ: Path) -> None:
    """logs/wakes/evil.jsonl (no wake number): root's `citizen status` (every citizen's
    row) and `citizen logs` still run."""
    _log(civ).parent.joinpath("evil.jsonl").write_text(json.dumps({"event": "x"}) + "\n")
    for args in (("status",), ("logs", "opus"), ("logs", "opus", "--json")):
        out = CliRunner().invoke(cli, list(args))
        assert out.exit_code == 0, (args, out.output)


@ROOT_ONLY
def test_logs_never_follow_a_planted_logs_directory(civ: Path, tmp_path: Path) -> None:
    """~/logs/wakes a link to a root-only directory of wake-shaped logs: nothing of it."""
    secret = _root_only_file(tmp_path, json.dumps({"event": "wake_start", "reason": MARK})
                             + "\n")
    secret.rename(secret.parent / "000001-TASK.jsonl")
    wakes = _log(civ).parent
    wakes.rmdir()
    wakes.symlink_to(secret.parent)
    for args in (("logs", "opus"), ("logs", "opus", "--wake", "1"), ("logs", "opus", "--json")):
        out = CliRunner().invoke(cli, list(args))
        assert MARK not in out.output, (args, out.output)


@ROOT_ONLY
def test_logs_do_not_hang_on_a_planted_fifo(civ: Path) -> None:
    os.mkfifo(_log(civ))
    for args in (("logs", "opus"), ("logs", "opus", "--wake", "1")):
        try:
            out = _run(civ, *args, timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"citizen {' '.join(args)} hangs on a FIFO planted as a wake log")
        assert "Traceback" not in out.stderr, out.stderr


def test_follow_reads_a_bounded_amount_of_a_line_without_end(tmp_path: Path) -> None:
    """`logs --follow` polls read_new: a 4 GB line with no newline must cost a bounded
    read per poll, and the tail must move past it (never re-read it forever)."""
    log = tmp_path / "000001-TASK.jsonl"
    with log.open("wb") as fh:
        fh.truncate(4 * 2**30)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n" + json.dumps({"event": "gate", "verdict": "after"}).encode() + b"\n")
    code = ("import resource, sys\nfrom pathlib import Path\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1536 * 2**20, 1536 * 2**20))\n"
            "from citizen.home import wakelog\n"
            "offset, seen = 0, []\n"
            "for _ in range(100000):\n"
            "    events, offset = wakelog.read_new(Path(sys.argv[1]), offset)\n"
            "    seen += events\n"
            "    if seen: break\n"
            "print(seen)\n")
    out = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)},
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "after" in out.stdout


def test_follow_prints_no_escape_from_a_wake_in_progress(civ: Path) -> None:
    log = _log(civ)
    log.write_text(json.dumps({"event": "wake_start", "ts": "2026-01-01T00:00:00+00:00",
                               "pid": os.getpid(), "reason": "\x1b]0;pwned\x07x\x9b2J"})
                   + "\n")
    events, _ = wakelog.read_new(log, 0)
    from citizen.home import transcript
    printed = transcript.line(events[0])
    out = CliRunner().invoke(cli, ["logs", "opus", "--wake", "1"])
    assert "\x1b" not in out.output and "\x9b" not in out.output and "pwned" in printed


# -- the one error path ---------------------------------------------------------------


def test_an_error_carries_no_escape_from_a_task_file(civ: Path) -> None:
    """A task file with a key the citizen made up (an escape sequence): the error root
    sees names the file, without the sequence."""
    queue = paths.home("opus").tasks / "queue"
    (queue / f"{TID}.json").write_text(json.dumps({"schema_version": 1, "id": TID,
                                                   "text": "x", "\x1b]52;c;cm0gLXJm\x07": 1}))
    for args in (("task", "show", "opus", TID), ("task", "cancel", "opus", TID),
                 ("task", "list", "opus")):
        out = CliRunner().invoke(cli, list(args))
        assert "\x1b" not in out.output and "\x07" not in out.output, (args, out.output)


# -- scripts/remove_citizen.sh ----------------------------------------------------------


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@pytest.fixture
def users() -> Iterator[tuple[str, str, str]]:
    """Three real Unix users of group `citizens`: the one removed, a peer that colludes
    with it, and a victim; the group is made (and removed after) when missing."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("real users need root and useradd")
    made_group = subprocess.run(["getent", "group", "citizens"], capture_output=True,
                                check=False).returncode != 0
    if made_group:
        _sh("groupadd", "citizens")
    tag = uuid.uuid4().hex[:6]
    names = (f"rmx{tag}", f"rmp{tag}", f"rmv{tag}")
    for n in names:
        _sh("useradd", "-M", "-d", f"/nonexistent-{n}", "-g", "citizens", "-s",
            "/usr/sbin/nologin", n)
    try:
        yield names
    finally:
        for n in names:
            subprocess.run(["userdel", n], capture_output=True, check=False)
        if made_group:
            subprocess.run(["groupdel", "citizens"], capture_output=True, check=False)


def _as(user: str, *cmd: str) -> None:
    _sh("runuser", "-u", user, "--", *cmd)


def test_remove_citizen_chowns_nothing_outside_through_a_swapped_path(
        users: tuple[str, str, str], tmp_path: Path) -> None:
    """The removed citizen made /tmp/<peer's dir>/tasks; between find listing it and
    chown running on its path, the colluding peer swaps its directory for a link to the
    victim's home. root's chown must not land on the victim's tasks/ (find ran it on a
    path, every component but the last followed). The wrapper plays the peer's timing."""
    gone, peer, victim = users
    victim_home = tmp_path / "victim"
    (victim_home / "tasks").mkdir(parents=True)
    shutil.chown(victim_home / "tasks", victim, "citizens")
    base = Path("/tmp") / f"attack-{uuid.uuid4().hex[:8]}"
    _as(peer, "mkdir", "-m", "0777", str(base))
    try:
        _as(gone, "mkdir", str(base / "tasks"))
        wrappers = tmp_path / "bin"
        wrappers.mkdir()
        real = shutil.which("chown")
        swap = (f"runuser -u {peer} -- sh -c 'mv {base} {base}.real && "
                f"ln -s {victim_home} {base}' 2>/dev/null\n")
        (wrappers / "chown").write_text(f"#!/bin/sh\n{swap}exec {real} \"$@\"\n")
        (wrappers / "chown").chmod(0o755)
        env = {**os.environ, "PATH": f"{wrappers}:{os.environ['PATH']}"}
        out = subprocess.run(["bash", str(REPO / "scripts" / "remove_citizen.sh"), gone],
                             capture_output=True, text=True, env=env, check=False)
        assert out.returncode == 0, out.stderr
        assert (victim_home / "tasks").stat().st_uid != 0, \
            "root chowned the victim's tasks/ through the peer's link"
    finally:
        for p in (base, Path(f"{base}.real")):
            if p.is_symlink():
                p.unlink()
            elif p.exists():
                shutil.rmtree(p)
