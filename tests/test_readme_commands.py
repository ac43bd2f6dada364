"""Every command of the README's "Operating a civilization" block, run as printed.

The block is read from README.md itself, so the README cannot drift from what runs:
each line is given to a shell with only `/tmp/civ` moved into the test's directory and
the venv's bin on PATH (as the README's set-up says). A command that runs until it is
stopped (`run`, `logs --follow`) is started, shown to be working, and stopped the way a
person does (SIGTERM; Ctrl-C). No command may print a traceback; each exits 0, except
the foreground wake, whose exit code says whether the embedded model did its task.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from citizen.config import paths
from tests.scripts import AT_A_TERMINAL

pytestmark = pytest.mark.model  # the wake, doctor and ask make real embedded-model calls
README = paths.project_dir() / "README.md"
LONG_RUNNING = ("run opus", "run --all", "logs opus --follow")
DEADLINE_S = 600.0


def readme_block() -> list[str]:
    """The command lines of the "Operating a civilization" block, comments removed."""
    text = README.read_text(encoding="utf-8")
    block = text.split("## Operating a civilization", 1)[1].split("\n\n", 2)[1]
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines()]
    return [line for line in lines if line.startswith("citizen ")]


def _until(check: object, what: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():  # type: ignore[operator]
        assert proc.poll() is None, f"{what}: the command ended ({proc.returncode})"
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S} s"
        time.sleep(0.1)


def test_the_readme_block_is_what_this_test_runs() -> None:
    lines = readme_block()
    assert lines[0] == "citizen init --root /tmp/civ" and len(lines) >= 15
    assert any(line.endswith(LONG_RUNNING[0]) for line in lines)


def test_every_readme_command_runs_as_printed(tmp_path: Path) -> None:
    civ = tmp_path / "civ"
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "citizen").is_file():
        pytest.skip(f"no citizen console script in {bin_dir} (install the project)")
    # A new operator's shell: no CIV_ROOT, the venv's bin first on PATH, no API key.
    env = {k: v for k, v in os.environ.items()
           if k not in ("CIV_ROOT", "ANTHROPIC_API_KEY", "PYTHONPATH")}
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    for line in readme_block():
        command = line.replace("/tmp/civ", str(civ))
        if command.endswith(LONG_RUNNING):
            _long_running(command, civ, env)
            continue
        run = subprocess.run(["bash", "-c", command], check=False, env=env, cwd=tmp_path,
                             text=True, capture_output=True, timeout=DEADLINE_S)
        said = run.stdout + run.stderr
        assert "Traceback" not in said, (line, said)
        if " wake opus " in command:  # the model's work decides; the exit code says it
            assert run.returncode in (0, 1), (line, said)
            assert re.search(r"^wake \d+ TASK: ", run.stdout, re.M), (line, said)
            assert run.returncode == 0 or "failed" in said or "never answered" in said, said
        else:
            assert run.returncode == 0, (line, said)


def _beating(beat: Path, pid: int) -> bool:
    """The heartbeat is this process's (`exec`: bash's pid is the daemon's) and says so."""
    try:
        data = json.loads(beat.read_text())
    except (OSError, ValueError):
        return False
    return bool(data["pid"] == pid and data["state"] in ("sleeping", "waking"))


def _long_running(command: str, civ: Path, env: dict[str, str]) -> None:
    proc = subprocess.Popen([*AT_A_TERMINAL, "bash", "-c", f"exec {command}"], env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        if command.endswith(("run opus", "run --all")):  # up once the heartbeats say so
            beats = civ / "shared" / "monitor" / "heartbeats"
            names = ["opus"] if command.endswith("run opus") else sorted(
                p.parent.name for p in civ.glob("*/config.json"))
            _until(lambda: all(_beating(beats / f"{n}.json", proc.pid) for n in names),
                   "the daemon's heartbeat", proc)
            proc.send_signal(signal.SIGTERM)  # systemctl stop: a wake in progress finishes
        else:  # follow: its header row, then Ctrl-C
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], DEADLINE_S)
            first = proc.stdout.readline() if ready else ""
            assert first.split()[:2] == ["WAKE", "TYPE"], first
            proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (command, out)
    assert "Traceback" not in out, (command, out)
