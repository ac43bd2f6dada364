"""A person's presence in a ThoughtStream room (seed §8.5) from the dashboard, in a real
browser: while a room's page is visible the room counts as watched (its `present` flag,
+0.2), and it cools (−0.4, not watched) when the page is hidden or left."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from starlette.applications import Starlette

from citizen import civilization
from citizen.web.app import make_app
from tests.browser import Served, console_errors, wait_for_text
from tests.test_web_browser import log_in

if TYPE_CHECKING:
    from selenium.webdriver import Chrome as WebDriver

ROOM = "general"


@pytest.fixture
def app(civ: Path) -> Starlette:
    return make_app(civ)


def present() -> object:
    return civilization.streams().room(ROOM).get("present")


def until(browser: WebDriver, check: Callable[[], bool], what: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10, poll_frequency=0.1).until(lambda _: check(), what)


def test_a_room_is_watched_while_its_page_is_visible_and_cools_when_it_is_hidden(
        browser: WebDriver, served: Served) -> None:
    assert present() is None  # nobody said yet
    start = civilization.streams().room(ROOM)["temperature_now"]
    log_in(browser, served)
    browser.get(served.url(f"/decisions/rooms/{ROOM}"))
    wait_for_text(browser, "h1", f"room {ROOM}")
    until(browser, lambda: present() is True, "the open page never marked the room watched")
    warm = civilization.streams().room(ROOM)["temperature_now"]
    assert warm == pytest.approx(min(1.0, start + 0.2), abs=0.06)  # it may cool a step
    wait_for_text(browser, "dd.present", "yes")  # the page's own live facts say so
    page = browser.current_window_handle
    browser.switch_to.new_window("tab")  # the room's page is now a hidden tab
    try:
        until(browser, lambda: present() is False, "the hidden page still marks the room")
        assert civilization.streams().room(ROOM)["temperature_now"] < warm
        browser.switch_to.window(page)  # shown again: watched again
        until(browser, lambda: present() is True, "the page shown again did not mark it")
    finally:
        for handle in browser.window_handles:
            if handle != page:
                browser.switch_to.window(handle)
                browser.close()
        browser.switch_to.window(page)
    browser.get(served.url("/decisions"))  # leaving the page: nobody watches
    until(browser, lambda: present() is False, "leaving the page did not end the watch")
    assert console_errors(browser) == []
