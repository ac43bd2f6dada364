"""Progress of `citizen backup now` and `citizen restore` (issue 31, item 7), through the
real CLI and restic: on a terminal a bar with restic's figures for the snapshot and a
heartbeat for a restore (restic 0.14's restore reports nothing); in a log one line when a
step starts and one when it ends - no \\r, no escape sequence - and stdout stays the
command's output. The terminal is a real pseudo-terminal (`pty`), redrawn every 0.05 s."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from citizen.config import paths
from tests.terminal import on_a_terminal

pytestmark = pytest.mark.skipif(shutil.which("restic") is None,
                                reason="restic is not installed (apt-get install restic)")


@pytest.fixture(autouse=True)
def _fast_redraw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_INTERVAL", "0.05")
    monkeypatch.setenv("TERM", "xterm")  # not on a terminal must mean the tty, not TERM


def in_a_log(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "citizen", *args], capture_output=True,
                          text=True, check=False, stdin=subprocess.DEVNULL, timeout=300)


def in_a_terminal(*args: str) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal; its exit and output."""
    # 200 columns: the whole path fits on the live line (a narrower one cuts it with "…");
    # the terminal's size, not a $COLUMNS pytest may leave in the environment.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return on_a_terminal([sys.executable, "-m", "citizen", *args], env=env, columns=200)


def test_not_on_a_terminal_a_line_when_each_step_starts_and_ends(civ: Path) -> None:
    done = in_a_log("backup", "now", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["snapshot"]  # stdout is the command's output, only
    lines = done.stderr.splitlines()
    assert "started: snapshot of 4 paths" in lines, lines  # three homes and the commons
    assert any(re.fullmatch(r"done: snapshot of 4 paths \(\d+ s\)", x) for x in lines), lines
    assert "started: retention (forget and prune)" in lines, lines
    assert any(x.startswith("done: retention (forget and prune) (") for x in lines), lines

    back = in_a_log("restore", "--from", "latest", "--citizen", "opus")
    assert back.returncode == 0, back.stderr
    home = paths.citizen_home("opus")
    assert back.stderr.splitlines()[:2] == [f"started: restoring {home} from latest",
                                            back.stderr.splitlines()[1]]
    assert re.fullmatch(rf"done: restoring {re.escape(str(home))} from latest \(\d+ s\)",
                        back.stderr.splitlines()[1]), back.stderr
    assert f"restored {home}" in back.stdout
    for out in (done, back):
        assert "\r" not in out.stdout + out.stderr
        assert "\x1b" not in out.stdout + out.stderr


def test_on_a_terminal_a_bar_for_the_snapshot_and_a_heartbeat_for_a_restore(
        civ: Path) -> None:
    # Enough data that restic reports figures before it ends (incompressible).
    with (paths.citizen_home("opus") / "big.bin").open("wb") as fh:
        for _ in range(12):
            fh.write(os.urandom(4 << 20))
    rc, out = in_a_terminal("backup", "now")
    assert rc == 0, out
    drawn = out.split("\r")
    bars = [x for x in drawn if "snapshot of 4 paths" in x and re.search(r"\d+% \d+/\d+ MB", x)]
    assert bars, out  # restic's bytes, as a percent and MB
    assert "done: snapshot of 4 paths (" in out
    assert re.search(r"snapshot [0-9a-f]{8} in ", out), out  # the command's own output

    rc, out = in_a_terminal("restore", "--from", "latest", "--citizen", "opus")
    assert rc == 0, out
    home = re.escape(str(paths.citizen_home("opus")))
    assert re.search(rf"restoring {home} from latest +\.\.\. \d+ s", out), out  # heartbeat
    assert re.search(rf"done: restoring {home} from latest \(\d+ s\)", out), out
