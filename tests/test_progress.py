"""Progress on long steps (issue 31): scripts/lib/progress.sh, which bootstrap.sh and
setup_server.sh wrap around their long commands. On a terminal a status line redrawn
every few seconds (a bar with a time estimate when the size is known); in a log, one
line when a step starts and one when it ends, never a \\r. Run under a real pseudo-
terminal (the `pty` module) with a fake long command and a short interval."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from citizen.config import paths
from tests.terminal import on_a_terminal

HELPER = paths.project_dir() / "scripts" / "lib" / "progress.sh"


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the step logs a failure leaves
    monkeypatch.setenv("PROGRESS_INTERVAL", "0.2")


def in_a_terminal(script: str) -> tuple[int, str]:
    """Run bash `script` with stdout and stderr on a pseudo-terminal; its exit and output."""
    return on_a_terminal(["bash", "-c", f"source {HELPER}\n{script}"])


def in_a_log(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f"source {HELPER}\n{script}"], capture_output=True,
                          text=True, check=False, stdin=subprocess.DEVNULL)


def test_a_long_step_shows_a_heartbeat_on_a_terminal() -> None:
    rc, out = in_a_terminal('progress_run --about "about 3 min on 2 cores" '
                            '"building llama.cpp" -- sleep 1.5\n'
                            'echo "left: $(jobs -p | wc -l)"')
    assert rc == 0, out
    beats = [b for b in out.split("\r") if "building llama.cpp ..." in b]
    assert len(beats) >= 3, out  # one every 0.2 s over 1.5 s
    assert "(about 3 min on 2 cores)" in beats[0]
    assert "building llama.cpp ... 1 s" in out, out  # the elapsed time moves
    assert "done: building llama.cpp (" in out
    assert "left: 0" in out  # the heartbeat loop is gone once the step ends


def test_a_step_of_known_size_shows_a_bar_with_a_time_estimate(tmp_path: Path) -> None:
    part = tmp_path / "model.partial-1"
    grow = f"for i in 1 2 3 4 5 6; do head -c 1048576 /dev/zero >> {part}; sleep 0.3; done"
    rc, out = in_a_terminal(f'progress_run --bytes {6 * 2**20} '
                            f'--watch "{tmp_path}/model.partial-*" '
                            f'"assembling the model" -- sh -c "{grow}"')
    assert rc == 0, out
    bars = [b for b in out.split("\r") if "assembling the model [" in b]
    assert any("MB, about" in b and "s left" in b for b in bars), out
    assert any("%" in b and "/6 MB" in b for b in bars), out


def test_not_on_a_terminal_only_a_start_and_an_end_line() -> None:
    done = in_a_log('progress_run --about "about 3 min" "building llama.cpp" -- '
                    'sh -c "echo compiler chatter; sleep 1"')
    assert done.returncode == 0
    assert "\r" not in done.stdout + done.stderr
    assert "\033" not in done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "    started: building llama.cpp"
    assert lines[1].startswith("    done: building llama.cpp (") and len(lines) == 2, lines
    assert "compiler chatter" not in done.stdout + done.stderr  # kept in the log only


def test_a_failed_step_keeps_its_exit_status_and_shows_its_output() -> None:
    done = in_a_log('progress_run "building" -- sh -c "echo cc: error: no cmake >&2; exit 3"'
                    ' || echo "exit was $?"')
    assert "exit was 3" in done.stdout
    assert "failed: building (exit 3" in done.stderr
    assert "cc: error: no cmake" in done.stderr
    log = done.stderr.rsplit("(the whole output: ", 1)[1].split(")")[0]
    assert "no cmake" in Path(log).read_text()
    Path(log).unlink()


def test_the_callers_exit_trap_survives_and_no_loop_outlives_the_script() -> None:
    rc, out = in_a_terminal("trap 'echo caller cleanup' EXIT\n"
                            "progress_run step -- true\n"
                            "progress_run failing -- false || true\n"
                            "exit 4")
    assert rc == 4 and "caller cleanup" in out, out
    # The script was killed mid-step: its EXIT trap runs and the loop ends with it.
    rc, out = in_a_terminal("trap 'echo caller cleanup' EXIT\n"
                            "progress_run step -- sh -c 'kill -TERM $PPID; sleep 1'\n"
                            "echo not reached")
    assert "not reached" not in out, out
    assert "caller cleanup" in out, out
