"""The real-browser harness (tests/browser.py), proven in a headless Chromium: a page loads
with no console error (and a broken one is caught), injected markup shows as text (and
markup that runs is caught), a server-sent event reaches the open page within 2 s, and
screenshots are kept at desktop and phone sizes.

The app is tests/web_stand_in.py, a FIXTURE until citizen/web/app.py lands; then the one
import line below becomes `from citizen.web.app import make_app` and these tests move to
the dashboard's own pages and routes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from starlette.applications import Starlette

from tests.browser import (
    DESKTOP,
    PHONE,
    Served,
    console_errors,
    pending_alert,
    png_size,
    screenshot,
    wait_for_text,
)
from tests.web_stand_in import make_app  # the stand-in; citizen.web.app's when it lands

# The fixtures `browser` (a headless Chromium on the served app; skipped with the reason
# when chromium, chromedriver or selenium is missing) and `served` (the `app` below under
# uvicorn) come from tests/browser.py, a plugin of tests/conftest.py.
if TYPE_CHECKING:
    from selenium.webdriver import Chrome as WebDriver

INJECTED = "<script>alert(1)</script>"


@pytest.fixture
def app(civ_root: Path) -> Starlette:
    return make_app(civ_root)


def test_a_page_loads_with_no_console_error(browser: WebDriver, served: Served) -> None:
    browser.get(served.url("/"))
    wait_for_text(browser, "h1", "Civilization")
    assert console_errors(browser) == []


def test_a_console_error_is_caught(browser: WebDriver, served: Served) -> None:
    browser.get(served.url("/broken"))
    wait_for_text(browser, "h1", "Civilization")
    errors = console_errors(browser)
    assert any("missing.js" in e for e in errors), errors


def test_injected_markup_is_shown_as_text(browser: WebDriver, served: Served) -> None:
    from selenium.webdriver.common.by import By

    browser.get(served.url("/?note=" + INJECTED))
    assert wait_for_text(browser, "#note", "alert(1)") == INJECTED
    assert pending_alert(browser) is None
    assert browser.find_elements(By.CSS_SELECTOR, "#note script") == []


def test_markup_that_runs_is_caught(browser: WebDriver, served: Served) -> None:
    # The harness's own check: a page that does NOT escape (and sends no CSP) raises the
    # alert, and pending_alert sees it - so its None above means no script ran.
    browser.get(served.url("/unsafe?note=" + INJECTED))
    assert pending_alert(browser) == "1"


def test_a_server_sent_event_updates_the_open_page_within_2_s(
        browser: WebDriver, served: Served, civ_root: Path) -> None:
    browser.get(served.url("/"))
    (civ_root / "live.txt").write_text("first", encoding="utf-8")
    wait_for_text(browser, "#live", "first", timeout=2)
    (civ_root / "live.txt").write_text("a debate move", encoding="utf-8")
    wait_for_text(browser, "#live", "a debate move", timeout=2)
    assert console_errors(browser) == []


def test_screenshots_are_kept_at_desktop_and_phone_sizes(
        browser: WebDriver, served: Served, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARTIFACTS", str(tmp_path / "artifacts"))
    browser.get(served.url("/"))
    wait_for_text(browser, "h1", "Civilization")
    desktop, phone = screenshot(browser, "stand-in")
    assert (desktop.name, phone.name) == ("stand-in-desktop.png", "stand-in-phone.png")
    assert desktop.parent == tmp_path / "artifacts"
    assert png_size(desktop) == DESKTOP
    assert png_size(phone) == PHONE
