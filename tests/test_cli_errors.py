"""One error path: every failure is one line naming the fix, with an exit code a script can
read (1 it ran and failed, 2 no such thing); a traceback only with -vv. And the hints a
command prints run as printed."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from citizen.cli import COMMANDS, cli
from citizen.config import paths
from citizen.errors import CitizenError
from citizen.llm.scripted import ScriptedProvider
from tests.scripts import Actor, call, queue


@click.command()
def boom() -> None:
    """A command with a bug in it."""
    raise RuntimeError("the bug's own words")


def _citizen_script() -> Path:
    """The real `citizen` console script beside this interpreter."""
    script = Path(sys.executable).parent / "citizen"
    if not script.is_file():
        pytest.skip(f"no citizen console script at {script} (install the project)")
    return script


def _blocked_ancestor(path: Path) -> Path | None:
    """The first directory above `path` that others may not search (/root under pyenv)."""
    for parent in reversed(path.parents):
        if not parent.stat().st_mode & stat.S_IXOTH:
            return parent
    return None


def _as_nobody(args: list[str], env: dict[str, str],
               keep: Path) -> subprocess.CompletedProcess[str]:
    """Run `args` as the user nobody. When the interpreter lives where nobody may not look
    (pyenv under /root, 0700), a private mount namespace lays a 0755 tmpfs over that
    directory with the interpreter bound back in: nothing changes outside this process."""
    prefix = Path(sys.base_prefix).resolve()
    inner = ["runuser", "-u", "nobody", "--", "env", *(f"{k}={v}" for k, v in env.items()),
             *args]
    blocked = _blocked_ancestor(prefix)
    if blocked is None:
        return subprocess.run(inner, capture_output=True, text=True, timeout=120, check=False)
    if shutil.which("unshare") is None:
        pytest.skip(f"the interpreter is under {blocked}, which nobody may not search, "
                    "and there is no unshare to lend it")
    script = (f"set -e; mount --bind {prefix} {keep}; "
              # 0755: nobody may search down to the interpreter, and read nothing else here.
              f"mount -t tmpfs -o mode=0755 tmpfs {blocked}; mkdir -p {prefix}; "
              f"mount --bind {keep} {prefix}; exec {shlex.join(inner)}")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def reachable_civ(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A dev-mode civilization where user nobody may reach its root (pytest's own tmp is
    0700 root's): a directory of its own in /tmp, removed after."""
    from citizen.admin import founding

    civ = Path(tempfile.mkdtemp(prefix="cli-errors-"))
    try:
        civ.chmod(0o755)  # nobody may look in the root; the homes below decide the rest
        monkeypatch.setenv("CIV_ROOT", str(civ))
        founding.init(["opus", "mira", "aria"])
        yield civ
    finally:
        shutil.rmtree(civ)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it runs the CLI as user nobody")
@pytest.mark.parametrize("locked", ["homes", "root"])
def test_a_user_without_rights_is_told_to_run_it_with_sudo(reachable_civ: Path, tmp_path: Path,
                                                          locked: str) -> None:
    """As on a server: the homes (or the whole root) are not this user's. Each command
    ends in one line saying to run it as root, with the command to paste - never a
    PermissionError traceback (what status, logs, task add and wake printed before)."""
    script = _citizen_script()
    civ = reachable_civ
    for home in ("opus", "mira", "aria"):
        # 0700 root's: as a citizen's home is not the operator's own user's on a server.
        (civ / home).chmod(0o700)
    if locked == "root":
        civ.chmod(0o700)
    env = {"CIV_ROOT": str(civ), "PYTHONPATH": str(paths.project_dir()),
           "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for command in (["status"], ["logs", "opus"], ["task", "add", "opus", "x"],
                    ["wake", "opus"]):
        run = _as_nobody([str(script), *command], env, keep=tmp_path)
        assert run.returncode == 1, (command, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr, run.stderr
        # `wake` writes the citizen's home as the citizen: its hint is runuser, not root.
        sudo = "sudo runuser -u opus -- " if command[0] == "wake" else "sudo "
        assert "run it as: " + sudo in run.stderr, run.stderr
        assert command[0] == "wake" or "needs root" in run.stderr, run.stderr
        hint = run.stderr.split("run it as: " + sudo, 1)[1].strip()
        assert hint.endswith(f"--root {civ} {shlex.join(command)}"), hint


def test_a_bug_is_one_line_and_minus_vv_shows_its_traceback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "boom", "tests.test_cli_errors:boom")
    result = CliRunner().invoke(cli, ["boom"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: internal error: RuntimeError: the bug's own words (run with -vv for the "
        "traceback, and report it)"]
    assert isinstance(result.exception, SystemExit)  # an exit, not a crash
    debug = CliRunner().invoke(cli, ["-vv", "boom"])
    assert isinstance(debug.exception, RuntimeError)  # -vv: the exception itself, raised


def test_the_console_script_shows_a_traceback_only_with_minus_vv() -> None:
    code = ("import sys\nfrom citizen.cli import COMMANDS, main\n"
            "COMMANDS['boom'] = 'tests.test_cli_errors:boom'\n"
            "sys.argv = ['citizen', *sys.argv[1:]]\nmain()\n")
    for flags, traceback in (([], False), (["-vv"], True)):
        run = subprocess.run([sys.executable, "-c", code, *flags, "boom"], capture_output=True,
                             text=True, check=False, cwd=paths.project_dir())
        assert run.returncode == 1
        assert ("Traceback" in run.stderr) is traceback, run.stderr
        assert "the bug's own words" in run.stderr


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"dir"
            for p in sorted(folder.rglob("*"))}


def test_an_unknown_wake_type_lists_the_types_and_writes_nothing(civ: Path) -> None:
    """It used to run and log wake 1, "skipped - no module registers it", exit 0."""
    before = _tree(civ / "opus")
    result = CliRunner().invoke(cli, ["wake", "opus", "--type", "nosuch"])
    assert result.exit_code == 2, result.output
    assert "no wake type 'NOSUCH'" in result.output
    assert "TASK" in result.output and "REFLECT" in result.output
    assert _tree(civ / "opus") == before  # no wake log, no wake number taken


@pytest.mark.parametrize("args", [
    ["doctor", "--citizen", "nosuch"],
    ["ask", "--citizen", "nosuch", "hi"],
    ["proposal", "start", "--by", "nosuch", "Create hi.md"],
    ["stream", "rate", "stream-1", "--citizen", "nosuch", "--score", "0.5"],
])
def test_a_citizen_named_by_an_option_must_exist(civ: Path, args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "no citizen 'nosuch'" in result.output and "aria, mira, opus" in result.output


def _wake_json(*args: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["wake", "opus", "--type", "TASK", "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_a_wake_that_did_its_work_exits_0(civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    queue().add("Write notes/plan.md with the three steps")
    actor = Actor(call("write_file", path="notes/plan.md", content="1. a\n2. b\n3. c\n"),
                  call("task_complete", summary="notes/plan.md has the steps"))
    monkeypatch.setattr("citizen.wake.flow.make_provider", lambda cfg, secrets: actor)
    code, out = _wake_json()
    assert code == 0, out
    assert (out["status"], out["task_state"], out["model_answered"], out["failed"]) == (
        "ok", "done", True, False)


def test_an_idle_wake_exits_0_and_asked_no_model(civ: Path) -> None:
    code, out = _wake_json()
    assert code == 0 and out["status"] == "idle" and out["model_answered"] is None


def test_a_wake_whose_task_failed_exits_1(civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Done claimed three times without the named file: the task fails, the wake ran
    "ok" - and exited 0 before, so a script could not tell."""
    task = queue().add("Write notes/plan.md with the three steps")
    actor = Actor(*[call("task_complete", summary="done") for _ in range(3)])
    monkeypatch.setattr("citizen.wake.flow.make_provider", lambda cfg, secrets: actor)
    code, out = _wake_json()
    assert code == 1, out
    assert (out["task"], out["task_state"], out["failed"]) == (task.id, "failed", True)


def test_a_wake_whose_model_never_answered_exits_1(civ: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    queue().add("Write notes/plan.md with the three steps")
    silent = ScriptedProvider()  # every call: ProviderError
    monkeypatch.setattr("citizen.wake.flow.make_provider", lambda cfg, secrets: silent)
    code, out = _wake_json()
    assert silent.requests, "the wake never asked the model"
    assert code == 1, out
    assert (out["model_answered"], out["calls"], out["failed"]) == (False, 0, True)
    text = CliRunner().invoke(cli, ["wake", "opus", "--type", "TASK"])
    assert text.exit_code == 0  # no task left: idle


def test_the_wake_hint_carries_the_root_and_the_path(civ: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`citizen wake --root R` ended with `log: citizen logs opus --wake 1`: pasted, it
    looked under /home. The hint carries --root, and the full path of citizen when PATH
    does not lead to it."""
    result = CliRunner().invoke(cli, ["--root", str(civ), "wake", "opus"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"log: citizen --root {civ} logs opus --wake 1"
    elsewhere = tmp_path / "venv" / "bin" / "citizen"
    monkeypatch.setattr(sys, "argv", [str(elsewhere), "wake", "opus"])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = CliRunner().invoke(cli, ["--root", str(civ), "wake", "opus"])
    assert result.output.splitlines()[-1] == (
        f"log: {elsewhere} --root {civ} logs opus --wake 2"), result.output



@click.command()
def refuses() -> None:
    """A lower layer's refusal, quoting a command as it cannot know this run typed it."""
    raise CitizenError("citizen ghost has no home - create it with `citizen init`")


def test_a_lower_layers_hint_is_made_pasteable(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "refuses", "tests.test_cli_errors:refuses")
    monkeypatch.delenv("CIV_ROOT", raising=False)
    civ = tmp_path / "civ"
    result = CliRunner().invoke(cli, ["--root", str(civ), "refuses"])
    assert result.exit_code == 1
    assert f"`citizen --root {civ} init`" in result.output, result.output


def test_a_reader_that_goes_away_ends_the_command_quietly(reachable_civ: Path) -> None:
    # `citizen task list opus | head -1`: the pipe closes after one line; no error line
    # about disks and mounts, no traceback.
    for i in range(400):
        CliRunner().invoke(cli, ["--root", str(reachable_civ), "task", "add", "opus", f"t{i}"])
    script = _citizen_script()
    run = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {script} --root {reachable_civ} task list opus"
         " --wide | head -1"], check=False, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(paths.project_dir())})
    assert run.stdout.startswith("STATE"), run.stdout
    assert run.stderr == "", run.stderr
