"""The dashboard on a phone (issue 44): at a 390 px wide viewport the money an operator
looks for first - each citizen's Today and Burn rate - and every cell of the Decisions
page's tables lie within the screen as the page opens, with no sideways swipe of the page
or of the table inside it. Headless Chromium (tests/browser.py) with a phone's device
metrics, on the real app over a dev civilization with real wakes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from starlette.applications import Starlette

from citizen import civilization
from citizen.web.app import make_app
from tests.browser import PHONE, Served, console_errors, wait_for_text
from tests.test_web_browser import log_in, small_wake
from tests.web_world import waiting

if TYPE_CHECKING:
    from selenium.webdriver import Chrome as WebDriver

# Where each element of `css` lies, as the page opens (not scrolled), and its label.
BOXES = """return Array.from(document.querySelectorAll(arguments[0])).map(e => {
  const r = e.getBoundingClientRect();
  return {text: e.innerText, label: getComputedStyle(e, "::before").content,
          left: r.left, right: r.right, width: r.width};});"""
# How far `main` and the document could scroll sideways.
OVERFLOW = """const m = document.querySelector('main'), d = document.documentElement;
return [m.scrollWidth - m.clientWidth, d.scrollWidth - d.clientWidth];"""


@pytest.fixture
def app(civ: Path) -> Starlette:
    return make_app(civ)


@pytest.fixture
def phone(browser: WebDriver, served: Served) -> Iterator[WebDriver]:
    """The logged-in browser with a phone's viewport (390x844, mobile), reset after."""
    log_in(browser, served)
    width, height = PHONE
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": True})
    try:
        yield browser
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def on_screen(driver: WebDriver, css: str) -> list[dict[str, Any]]:
    """The boxes of the elements at `css` (at least one), each checked to lie within the
    viewport's width; returns them."""
    boxes: list[dict[str, Any]] = driver.execute_script(BOXES, css)
    assert boxes, f"nothing at {css!r}"
    width = driver.execute_script("return window.innerWidth")
    assert width == PHONE[0]
    outside = [b for b in boxes if b["width"] <= 0 or b["left"] < 0 or b["right"] > width]
    assert outside == [], f"{css!r} lies outside 0..{width} px: {outside}"
    return boxes


def test_today_and_the_burn_rate_are_on_a_phones_screen_without_a_swipe(
        phone: WebDriver, served: Served, civ: Path) -> None:
    small_wake("opus")
    small_wake("mira")
    phone.get(served.url("/"))
    wait_for_text(phone, "table.citizens", "opus")
    today = on_screen(phone, "table.citizens td.money")
    burn = on_screen(phone, "table.citizens td.burn")
    assert len(today) == len(burn) == len(civilization.citizens())
    assert all("$" in b["text"] for b in today + burn)
    assert (today[0]["label"], burn[0]["label"]) == ('"Today: "', '"Burn rate: "')
    assert phone.execute_script(OVERFLOW) == [0, 0]
    assert console_errors(phone) == []


def test_the_decisions_tables_fit_a_phones_screen(
        phone: WebDriver, served: Served, civ: Path) -> None:
    pid = waiting("Write notes/a.md saying a, and nothing else at all in that file")
    debates = civilization.debates()
    debates.start("Should the library prefer tabs over spaces?", ["opus", "mira"],
                  "operator")
    phone.get(served.url("/decisions"))
    wait_for_text(phone, "#queue table", pid)
    on_screen(phone, "main table td")
    assert phone.execute_script(OVERFLOW) == [0, 0]
    assert console_errors(phone) == []
