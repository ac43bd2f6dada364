"""The live tail of a wake in progress, in a real browser (issue 32, item 2): a real wake
whose scripted model waits for the test; its page, opened before the wake's first tool
call, shows that call as the wake writes it, and the wake's end once it has ended - as
`citizen logs --follow` does in a terminal (tests/test_cli_logs.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from starlette.applications import Starlette

from citizen.config import paths
from citizen.home import wakelog
from citizen.web.app import make_app
from tests.browser import Served, console_errors, wait_for_text
from tests.test_cli_logs import DEADLINE_S, _env
from tests.test_web_browser import log_in

if TYPE_CHECKING:
    from selenium.webdriver import Chrome as WebDriver

# The wake in progress: tests/blocking_wake.py (its model waits for the test's files).


@pytest.fixture
def app(civ: Path) -> Starlette:
    return make_app(civ)


@pytest.fixture
def waiting_wake(civ: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The wake above, started; yields it and the folder of its gates."""
    wake = subprocess.Popen([sys.executable, "-m", "tests.blocking_wake", str(tmp_path), "go=2",
                             "release=1"], env=_env(),
                            cwd=paths.project_dir(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        yield wake, tmp_path
    finally:
        if wake.poll() is None:
            wake.kill()
            wake.wait()


def _log_of_the_wake(wake: subprocess.Popen[str]) -> Path:
    """The wake's log, once it exists (the wake writes it at its start)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        logs = wakelog.wake_logs(paths.home("opus"))
        if logs:
            return logs[0]
        if wake.poll() is not None:
            raise AssertionError(f"the wake ended before its log: {wake.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"no wake log within {DEADLINE_S} s")


def test_the_page_of_a_wake_in_progress_shows_its_tool_call_and_then_its_end(
        browser: WebDriver, served: Served,
        waiting_wake: tuple[subprocess.Popen[str], Path]) -> None:
    wake, gates = waiting_wake
    number = int(wakelog.name_of(_log_of_the_wake(wake)).partition("-")[0])
    log_in(browser, served)
    browser.get(served.url(f"/wakes/opus/{number}"))
    wait_for_text(browser, "#summary", "running")
    assert browser.find_elements("css selector", "#events li.event-tool_call") == []
    (gates / "go").touch()  # the model asks for write_file; the wake logs the call
    wait_for_text(browser, "#events li.event-tool_call code.tool", "write_file", timeout=30)
    # Shown while the wake is still waiting for its model: it has not ended.
    assert wake.poll() is None
    (gates / "release").touch()
    wait_for_text(browser, "#summary", "ok", timeout=30)
    wait_for_text(browser, "#events", "task_complete")
    out, err = wake.communicate(timeout=DEADLINE_S)
    assert wake.returncode == 0 and out.startswith("ok"), err
    # Each event once: the page's own and the tail's do not overlap.
    calls = [e.text for e in browser.find_elements(
        "css selector", "#events li.event-tool_call code.tool")]
    assert calls == ["write_file", "task_complete"]
    assert console_errors(browser) == []
