"""The dashboard in a real browser (issue 32): headless Chromium (tests/browser.py) on the
real app (citizen.web.app:make_app) over a dev civilization of three citizens with wake
logs written by real wakes on the scripted model, a proposal waiting for a person and a
running debate. Every page loads with no console error and is kept as screenshots; the
wake page lists what `citizen logs --wake` lists; approving through the page records a
human decision and lets the proposal run; a debate move shows within 2 s; markup a
citizen wrote stays text; nothing is served to a browser without the token."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.testclient import TestClient

from citizen import civilization
from citizen.broker import onboarding
from citizen.cli import cli
from citizen.config import paths
from citizen.home.tasks import TaskQueue
from citizen.wake.flow import run_wake
from citizen.web import auth
from citizen.web.app import make_app
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
from tests.scripts import Actor, call
from tests.test_web_app import csrf_of, logged_in
from tests.test_web_app import wake as opus_wake
from tests.web_world import commons, waiting

# The fixtures `browser` (a headless Chromium; skipped with the reason when chromium,
# chromedriver or selenium is missing) and `served` (the `app` below under uvicorn on a
# free loopback port) come from tests/browser.py, a plugin of tests/conftest.py.
if TYPE_CHECKING:
    from selenium.webdriver import Chrome as WebDriver

INJECTED = "<script>alert(1)</script>"


@dataclass
class World:
    wake: int  # opus's wake with three tool calls
    waiting: str  # the proposal that waits for a person
    debate: str  # a running debate with one move


def small_wake(name: str) -> None:
    """A real TASK wake of `name` on the scripted model: one file written, the task done."""
    TaskQueue(paths.home(name).tasks).add("Write notes/b.md saying b")
    actor = Actor(call("write_file", cost=0.01, path="notes/b.md", content="b"),
                  call("task_complete", summary="notes/b.md says b"))
    result = run_wake(name, wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason


@pytest.fixture
def world(civ: Path) -> World:
    number = opus_wake(text="Done: " + INJECTED)
    small_wake("mira")
    small_wake("aria")
    debates = civilization.debates()
    did = debates.start(f"Should the library prefer tabs? {INJECTED}", ["opus", "mira"],
                        "operator").id
    debates.move(did, "opus", {"move": "CLAIM", "content": "tabs keep diffs small"})
    return World(number, waiting(INJECTED), did)


@pytest.fixture
def app(civ: Path) -> Starlette:
    return make_app(civ)


def log_in(browser: WebDriver, served: Served) -> None:
    """The operator's way in: the token into the login form."""
    from selenium.webdriver.common.by import By

    browser.get(served.url("/login"))
    browser.find_element(By.NAME, "token").send_keys(auth.load_token())
    browser.find_element(By.CSS_SELECTOR, "form[action='/login'] button").click()
    wait_for_text(browser, "h1", "Civilization")


def test_every_page_loads_with_no_console_error_and_is_kept_as_screenshots(
        browser: WebDriver, served: Served, world: World) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, served)
    pages = {"civilization": ("/", "Civilization"),
             "wakes": ("/wakes/opus", "opus's wakes"),
             "wake": (f"/wakes/opus/{world.wake}", f"wake {world.wake}"),
             "decisions": ("/decisions", "Decisions"),
             "proposal": (f"/decisions/proposals/{world.waiting}", world.waiting),
             "debate": (f"/decisions/debates/{world.debate}", world.debate),
             "money": ("/money", "Money")}
    for name, (path, heading) in pages.items():
        browser.get(served.url(path))
        wait_for_text(browser, "h1", heading)
        if name == "money":  # uPlot drew the spend of the three wakes
            assert browser.find_elements(By.CSS_SELECTOR, ".chart .uplot canvas"), path
        assert console_errors(browser) == [], path
        desktop, phone = screenshot(browser, name)
        assert (png_size(desktop), png_size(phone)) == (DESKTOP, PHONE)


def test_the_wake_page_lists_the_tool_calls_citizen_logs_prints(
        browser: WebDriver, served: Served, world: World) -> None:
    from selenium.webdriver.common.by import By

    out = CliRunner().invoke(cli, ["logs", "opus", "--wake", str(world.wake)]).output
    cli_calls = [(m.group(1), json.loads(m.group(2))) for m in
                 re.finditer(r"^\S+ +tool (\S+) (\{.*\})$", out, re.M)]
    assert [name for name, _ in cli_calls] == ["write_file", "read_file", "task_complete"]
    log_in(browser, served)
    browser.get(served.url(f"/wakes/opus/{world.wake}"))
    wait_for_text(browser, "h1", f"wake {world.wake}")
    shown = [(e.find_element(By.CSS_SELECTOR, "code.tool").text,
              json.loads(e.find_element(By.CSS_SELECTOR, "pre.args").text))
             for e in browser.find_elements(By.CSS_SELECTOR, "li.event-tool_call")]
    assert shown == cli_calls


def test_approving_through_the_page_records_a_human_decision_and_lets_it_run(
        browser: WebDriver, served: Served, world: World) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, served)
    browser.get(served.url(f"/decisions/proposals/{world.waiting}"))
    browser.find_element(By.NAME, "why").send_keys("looks right")
    browser.find_element(By.ID, "approve").click()
    # 15 s: the POST records, rings the executor and renders; 2 cores shared under CI load.
    wait_for_text(browser, "#message", "Recorded: approve", timeout=15)
    d = commons().load(world.waiting)
    assert d.phase == "execute"  # the executor goes on
    assert d.human is not None and (d.human["operator"], d.human["decision"],
                                    d.human["why"]) == ("web", "approve", "looks right")
    assert any(p.name.endswith("CONSENSUS.json")
               for p in paths.home(d.owed_by).doorbell.iterdir())  # and is rung
    browser.get(served.url("/decisions"))
    wait_for_text(browser, "#queue", "Nothing waiting")
    assert console_errors(browser) == []


def test_a_refusal_is_shown_on_the_page_and_records_nothing(
        browser: WebDriver, served: Served, world: World) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, served)
    browser.get(served.url(f"/decisions/proposals/{world.waiting}"))
    browser.find_element(By.ID, "reject").click()  # a rejection without a reason
    wait_for_text(browser, "#message", "needs a reason", timeout=15)
    assert commons().load(world.waiting).human is None


def test_the_decision_without_the_session_or_the_csrf_value_is_refused_and_changes_nothing(
        civ: Path, world: World) -> None:
    url = f"/decisions/proposals/{world.waiting}"
    stranger = TestClient(make_app(civ))
    assert stranger.post(url, data={"decision": "approve", "why": "x"}).status_code == 401
    client = logged_in(civ)
    token = csrf_of(client.get(url).text)
    for data in ({"decision": "approve"}, {"decision": "approve", "csrf": "wrong"},
                 {"decision": "approve", "csrf": token + "x"}):
        assert client.post(url, data=data).status_code == 403
    forged = TestClient(make_app(civ))
    forged.cookies.set(auth.COOKIE, client.cookies[auth.COOKIE] + "0")
    assert forged.post(url, data={"decision": "approve", "csrf": token}).status_code == 401
    d = commons().load(world.waiting)
    assert (d.phase, d.human) == ("human", None)
    assert not list((commons().records_dir / world.waiting).glob("human*"))


def test_the_queue_says_nothing_waiting_only_when_the_store_holds_nothing(
        browser: WebDriver, served: Served, civ: Path) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, served)
    browser.get(served.url("/decisions"))
    assert wait_for_text(browser, "#queue", "Nothing waiting")
    pid = waiting()  # written to the store while the server runs: no restart, no cache
    browser.get(served.url("/decisions"))
    queue = wait_for_text(browser, "#queue table", pid)
    assert "Nothing waiting" not in queue
    commons().decide_human(pid, "alice", "reject", "not now")
    with onboarding.held() as folder:  # a source the page cannot read
        (folder / "0001-nova.json").write_text("{ not json")
    browser.get(served.url("/decisions"))
    alert = wait_for_text(browser, "#queue .error", "Could not read onboarding requests")
    assert "unknown" in alert
    assert browser.find_elements(By.CSS_SELECTOR, ".nothing-waiting") == []


def test_a_debate_move_appears_on_the_open_page_within_2_s(
        browser: WebDriver, served: Served, world: World) -> None:
    log_in(browser, served)
    browser.get(served.url(f"/decisions/debates/{world.debate}"))
    wait_for_text(browser, "#moves", "tabs keep diffs small")
    civilization.debates().move(world.debate, "mira",
                                {"move": "CLAIM", "content": "spaces render the same"})
    wait_for_text(browser, "#moves", "spaces render the same", timeout=2)
    assert console_errors(browser) == []


def test_markup_in_a_proposal_and_a_reply_is_shown_as_text(
        browser: WebDriver, served: Served, world: World) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, served)
    for path, css in ((f"/decisions/proposals/{world.waiting}", "dd.task"),
                      ("/decisions", "#debates table"),
                      (f"/decisions/debates/{world.debate}", "dd.topic"),
                      (f"/wakes/opus/{world.wake}", "ol.transcript")):
        browser.get(served.url(path))
        assert INJECTED in wait_for_text(browser, css, "alert(1)"), path
        assert pending_alert(browser) is None, path
        assert browser.find_elements(By.CSS_SELECTOR, f"{css} script") == [], path


def test_a_fresh_browser_gets_the_login_page_and_no_citizen_data(
        browser: WebDriver, served: Served, world: World) -> None:
    browser.execute_cdp_cmd("Network.clearBrowserCookies", {})
    for path in ("/", "/wakes/opus", f"/wakes/opus/{world.wake}", "/decisions", "/money",
                 f"/decisions/debates/{world.debate}",
                 f"/decisions/proposals/{world.waiting}"):
        browser.get(served.url(path))
        wait_for_text(browser, "h1", "Log in")
        assert browser.current_url == served.url("/login"), path
        for secret in ("opus", "mira", world.debate, world.waiting, "notes/"):
            assert secret not in browser.page_source, (path, secret)
    assert console_errors(browser) == []


def test_the_harness_sees_a_console_error_and_an_alert(
        browser: WebDriver, served: Served, civ: Path) -> None:
    # Its own check: the empty lists and Nones above could not pass on a broken page.
    browser.get(served.url("/static/missing.js"))
    assert any("404" in e for e in console_errors(browser))
    browser.get(served.url("/login"))
    browser.execute_script("alert('1')")
    assert pending_alert(browser) == "1"
