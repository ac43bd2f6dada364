"""Issue 28: git never runs what a repository or a home names, and never in a peer's
repository as the caller.

Each test plants the attack a hostile citizen made on a booted server - core.fsmonitor,
hooks, filter/merge/diff drivers, a pager, an editor, signing, an upload-pack hook - in a
peer's repository, in the citizen's own `.git/config` (its sandbox can write it) and in
`~/.gitconfig`, then runs the real code paths. Every trap touches a file in `marks`; none
may appear. On the code before `shared.gitsafe` every test here failed (the markers
appeared, or the cross-user fetch needed a safe.directory for every home).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import git
import pytest

from citizen.config import paths
from citizen.home import rollback, state
from citizen.tools import core_tools
from shared.consensus.world import World
from shared.evolution import Evolution
from tests import test_evolution
from tests.scripts import tool_env
from tests.test_evolution import APP, commit, reported

evo = test_evolution.evo  # the fixture: a baseline cloned into each citizen's ~/code

SYSTEM_PYTHON = "/usr/bin/python3"  # the venv's interpreter may sit in root's home
HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout",
         "post-merge", "pre-rebase", "post-rewrite", "reference-transaction", "pre-auto-gc",
         "post-index-change", "pre-merge-commit", "push-to-checkout")


def traps(marks: Path) -> dict[str, str]:
    """Config that makes git run a command (each touches its marker file)."""
    def touch(name: str, then: str) -> str:
        return f"touch {marks}/{name}; {then}"
    return {"core.fsmonitor": touch("fsmonitor", "false"),
            "filter.trap.clean": touch("clean", "cat"),
            "filter.trap.smudge": touch("smudge", "cat"),
            "merge.trap.driver": touch("merge", "true"),
            "diff.trap.textconv": touch("textconv", "cat"),
            "diff.trap.command": touch("diffcmd", "true"),
            "diff.external": touch("diffext", "true"),
            "core.pager": touch("pager", "cat"), "core.editor": touch("editor", "true"),
            "uploadpack.packObjectsHook": touch("packobjectshook", "exec"),  # git adds "$@"
            "core.alternateRefsCommand": touch("altrefs", "true"),
            "core.sshCommand": touch("ssh", "false"),
            "log.showSignature": "true"}


def hooks(hook_dir: Path, marks: Path) -> None:
    hook_dir.mkdir(parents=True, exist_ok=True)
    for name in HOOKS:
        (hook_dir / name).write_text(f"#!/bin/sh\ntouch {marks}/hook-{name}\n")
        (hook_dir / name).chmod(0o755)


def plant(repo: Path, marks: Path) -> None:
    """What a sandbox (or a peer) can write into a repository's .git."""
    for key, value in traps(marks).items():
        subprocess.run(["git", "config", "--file", str(repo / ".git" / "config"), key, value],
                       check=True)
    hooks(repo / ".git" / "hooks", marks)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* filter=trap diff=trap merge=trap\n")


def plant_home(home: Path, marks: Path) -> None:
    """A ~/.gitconfig a sandboxed shell wrote (global config counts as protected)."""
    cfg = str(home / ".gitconfig")
    for key, value in {**traps(marks), "core.hooksPath": str(home / "githooks"),
                       "safe.directory": "*"}.items():
        subprocess.run(["git", "config", "--file", cfg, key, value], check=True)
    hooks(home / "githooks", marks)


def sprung(marks: Path) -> list[str]:
    return sorted(p.name for p in marks.iterdir())


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    found = tmp_path / "marks"
    found.mkdir()
    return found


def run(name: str, tool_name: str, **args: object) -> Any:  # a tool answers JSON
    return json.loads(core_tools(code=True)[tool_name].run(tool_env(name), dict(args)))


def announced_change(civ: Path) -> str:
    commit(git.Repo(civ / "opus" / "code"), {"app.py": APP.replace("'hi'", "'hello'")},
           "warmer greeting")
    cid = str(run("opus", "code_announce", description="warmer", expected_outcome="hello")["id"])
    for peer in ("mira", "aria"):
        reported(peer, cid, "worked", "ok")
    return cid


def test_a_peers_planted_repository_never_runs_as_the_reviewer(evo: Path, marks: Path) -> None:
    cid = announced_change(evo)
    opus = evo / "opus" / "code"
    plant(opus, marks)
    # An alternate makes git ask the repository's alternateRefsCommand for its refs.
    (opus / ".git" / "objects" / "info" / "alternates").write_text(
        str(evo / "shared" / "baseline" / ".git" / "objects") + "\n")
    assert run("mira", "code_list_changes", citizen="opus") == ["app.py"]
    evolution = Evolution(evo / "shared", ["aria", "mira", "opus"], False,
                          code_dirs={"opus": opus})
    evolution.fetch(evolution.get(cid), evo / "mira" / "code")
    assert run("mira", "code_adopt", change_id=cid)["status"] == "merged"
    assert sprung(marks) == []


def test_a_home_gitconfig_is_data_for_the_daemon(evo: Path, marks: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cid = announced_change(evo)
    plant_home(evo / "mira", marks)
    monkeypatch.setenv("HOME", str(evo / "mira"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert run("mira", "code_my_divergence") == []
    assert run("mira", "code_adopt", change_id=cid)["status"] == "merged"
    assert "'hello'" in (evo / "mira" / "code" / "app.py").read_text()
    assert sprung(marks) == []


def test_the_citizens_own_repository_config_is_data_for_its_daemon(
        evo: Path, marks: Path) -> None:
    cid = announced_change(evo)
    mira = evo / "mira" / "code"
    plant(mira, marks)
    subprocess.run(["git", "config", "--file", str(mira / ".git" / "config"),
                    "commit.gpgSign", "true"], check=True)
    subprocess.run(["git", "config", "--file", str(mira / ".git" / "config"), "gpg.program",
                    f"touch {marks}/gpg; false"], check=True)
    # included config counts too: a driver the listing must find through include.path
    (evo / "mira" / "more.cfg").write_text(f'[filter "more"]\n\tsmudge = touch {marks}/inc; cat\n')
    subprocess.run(["git", "config", "--file", str(mira / ".git" / "config"), "include.path",
                    str(evo / "mira" / "more.cfg")], check=True)
    (mira / ".git" / "info" / "attributes").write_text("* filter=more diff=trap merge=trap\n")
    good = rollback.head(paths.home("mira"))
    assert run("mira", "code_adopt", change_id=cid)["status"] == "merged"
    assert "'hello'" in (mira / "app.py").read_text()
    home = paths.home("mira")
    state.mark(home, rollback.LKG, str(good))
    broken = rollback.roll_back(home, "three crashes")
    assert broken and rollback.head(home) == good and "'hi'" in (mira / "app.py").read_text()
    evolution = Evolution(evo / "shared", ["aria", "mira", "opus"], False)
    assert rollback.report_failed(home, broken, "crashed", evolution, good=good) == [cid]
    assert sprung(marks) == []


def test_the_group_writable_world_repository_is_data(civ: Path, marks: Path) -> None:
    world = World(civ / "shared")
    world.repo()
    plant(world.dir, marks)
    subprocess.run(["git", "config", "--file", str(world.dir / ".git" / "config"),
                    "core.worktree", str(civ / "mira")], check=True)  # checkout into a home
    (world.dir / "notes.txt").write_text("one\n")
    sha = world.commit("proposal 1", "opus")
    assert sha is not None
    world.revert(sha, "mira")
    (world.dir / "junk.txt").write_text("x\n")
    world.discard()
    assert not (world.dir / "notes.txt").exists() and not (civ / "mira" / "README.md").exists()
    assert sprung(marks) == []


# ------------------------------------------------------------ two real Unix users

@pytest.fixture
def two_users() -> Iterator[tuple[str, str, Path]]:
    if os.geteuid() != 0 or not shutil.which("runuser") or not shutil.which("useradd"):
        pytest.skip("needs root with runuser and useradd to make two real Unix users")
    same = f"import sys; sys.exit(sys.version_info[:2] != {sys.version_info[:2]})"
    if not Path(SYSTEM_PYTHON).is_file() or subprocess.run(
            [SYSTEM_PYTHON, "-c", same], check=False).returncode != 0:
        pytest.skip(f"another user needs a {sys.version_info[:2]} python at {SYSTEM_PYTHON}")
    names = [f"gs{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)
    top = Path(tempfile.mkdtemp(prefix="gitsafe-"))
    top.chmod(0o755)
    try:
        yield names[0], names[1], top
    finally:
        shutil.rmtree(top)
        for name in names:
            subprocess.run(["userdel", name], check=False)


def as_user(user: str, *argv: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["runuser", "-u", user, "--", "env", *[f"{k}={v}" for k, v in
                                                                  (env or {}).items()], *argv],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{argv[:3]} as {user}: {done.stderr[-800:]}")
    return done.stdout.strip()


def test_a_peers_repository_is_read_as_data_across_real_users(
        two_users: tuple[str, str, Path]) -> None:
    """opus (user A) plants everything in its repository; mira (user B, with a
    ~/.gitconfig her sandbox wrote) fetches the change through Evolution.fetch: without
    any safe.directory for opus's home, and without running a thing of either."""
    opus, mira, top = two_users
    marks = top / "marks"
    marks.mkdir(mode=0o777)
    marks.chmod(0o777)
    for user, name in ((opus, "opus"), (mira, "mira")):
        (top / name).mkdir()
        shutil.chown(top / name, user)
        as_user(user, "git", "init", "-q", "-b", "main", str(top / name / "code"))
        as_user(user, "git", "-C", str(top / name / "code"), "-c", "user.name=x", "-c",
                "user.email=x@x", "commit", "-q", "--allow-empty", "-m", "base")
    opus_code = top / "opus" / "code"
    (top / "opus" / "app.py").write_text(APP)
    as_user(opus, "cp", str(top / "opus" / "app.py"), str(opus_code / "app.py"))
    as_user(opus, "git", "-C", str(opus_code), "add", "app.py")
    as_user(opus, "git", "-C", str(opus_code), "-c", "user.name=opus", "-c",
            "user.email=o@x", "commit", "-q", "-m", "change")
    sha = as_user(opus, "git", "-C", str(opus_code), "rev-parse", "HEAD")
    plant(opus_code, marks)
    plant_home(top / "mira", marks)
    shutil.chown(top / "mira" / ".gitconfig", mira)
    for path in opus_code.rglob("*"):  # opus's files keep their owner, readable by mira
        shutil.chown(path, opus)
    script = ("import sys; from pathlib import Path; from shared.evolution import Evolution, "
              "Change; e = Evolution(Path(sys.argv[1]), [], False, code_dirs={'opus': "
              "Path(sys.argv[2])}); e.fetch(Change('c', 'opus', sys.argv[3], [], '', '', ''), "
              "Path(sys.argv[4]))")
    site = Path(git.__file__).parents[1]  # the venv's packages (gitpython)
    as_user(mira, SYSTEM_PYTHON, "-c", script, str(top / "shared"), str(opus_code), sha,
            str(top / "mira" / "code"),
            env={"HOME": str(top / "mira"),
                 "PYTHONPATH": f"{paths.project_dir()}:{site}"})
    assert as_user(mira, "git", "-C", str(top / "mira" / "code"), "cat-file", "-t", sha,
                   env={"GIT_CONFIG_GLOBAL": "/dev/null"}) == "commit"
    assert pwd.getpwuid((opus_code / ".git" / "config").stat().st_uid).pw_name == opus
    assert sprung(marks) == []
