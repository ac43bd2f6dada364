"""A real browser for the dashboard's tests: the app served by uvicorn on a free loopback
port, a headless Chromium driven by Selenium, and the helpers every page test needs.

Debian's `chromium` and `chromium-driver` (scripts/test.sh installs them as root); Selenium
finds /usr/bin/chromedriver by itself, nothing is downloaded. Without them the tests that
use `browser` are skipped with the reason (`unavailable()`).

    # the fixtures `browser` and `served` come from here (tests/conftest.py's pytest_plugins)
    @pytest.fixture
    def app(civ_root: Path) -> Starlette:  # what `served` serves
        return make_app(civ_root)

    def test_page(browser: WebDriver, served: Served) -> None:
        browser.get(served.url("/"))
        wait_for_text(browser, "h1", "Civilization")
        assert console_errors(browser) == []
        screenshot(browser, "civilization")

Screenshots go to $ARTIFACTS (CI keeps that directory) or tests/artifacts/ (ignored by git).
"""

from __future__ import annotations

import os
import shutil
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import uvicorn

from tests.mailserver import free_port

if TYPE_CHECKING:
    from selenium.webdriver import Chrome as WebDriver

DESKTOP = (1280, 800)
PHONE = (390, 844)  # an iPhone 12-15's CSS viewport
INSTALL = "apt-get install chromium chromium-driver (scripts/test.sh does it as root)"


def unavailable() -> str | None:
    """Why no browser test can run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed - pip install -e '.[dev]'"
    for program in ("chromium", "chromedriver"):
        if shutil.which(program) is None:
            return f"{program} is missing - {INSTALL}"
    return None


def artifacts_dir() -> Path:
    """Where screenshots are kept: $ARTIFACTS, else tests/artifacts/ (ignored by git)."""
    folder = Path(os.environ.get("ARTIFACTS") or Path(__file__).parent / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass
class Served:
    """An ASGI app listening on 127.0.0.1:`port` in a thread of this process."""

    port: int
    server: uvicorn.Server
    thread: threading.Thread

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def serve(app: Any, timeout: float = 10.0) -> Served:
    """Start `app` under uvicorn on a free loopback port; returns once it accepts."""
    port = free_port()
    # timeout_graceful_shutdown: a page's open event stream never ends by itself.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn:{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:  # wait until it listens (uvicorn sets this once bound)
        if not thread.is_alive() or time.monotonic() > deadline:
            raise AssertionError(f"uvicorn did not start on port {port} within {timeout} s")
        time.sleep(0.01)
    return Served(port, server, thread)


def stop(served: Served) -> None:
    served.server.should_exit = True
    served.thread.join(timeout=10)


def chromium() -> WebDriver:
    """A headless Chromium that keeps the page's console log (`console_errors`)."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    options.add_argument("--headless=new")
    # Root has no user namespace sandbox for Chromium's renderers (and /dev/shm is small
    # in containers): the test browser only ever opens our own loopback server.
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")
    options.add_argument("--disable-dev-shm-usage")
    options.add_argument(f"--window-size={DESKTOP[0]},{DESKTOP[1]}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    return webdriver.Chrome(options=options, service=service)


def console_errors(driver: WebDriver) -> list[str]:
    """The page's console errors (a failed load, an uncaught exception, a CSP violation)
    since the last call: the browser log is drained by reading it."""
    return [f"{e.get('source', '')}: {e['message']}" for e in browser_log(driver)
            if e.get("level") == "SEVERE"]


def browser_log(driver: WebDriver) -> list[dict[str, Any]]:
    """The console entries since the last read (reading drains them)."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return entries


def pending_alert(driver: WebDriver) -> str | None:
    """The text of an alert the page raised (dismissed here), or None: how injected
    markup that ran is caught."""
    from selenium.common.exceptions import NoAlertPresentException

    try:
        alert = driver.switch_to.alert
        text = alert.text
        alert.dismiss()
        return text
    except NoAlertPresentException:
        return None


def wait_for_text(driver: WebDriver, css: str, text: str, timeout: float = 5.0) -> str:
    """Wait until the element at `css` contains `text`; returns its whole text.

    :raises AssertionError: it did not within `timeout` seconds (with what it showed).
    """
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    def shows(d: WebDriver) -> bool:
        try:
            return bool(expected_conditions.text_to_be_present_in_element(
                (By.CSS_SELECTOR, css), text)(d))
        except WebDriverException as exc:
            # Mid-navigation the element found may belong to the page being left: Chromium
            # says "Node with given id does not belong to the document" (not a stale
            # element error, so WebDriverWait would not retry it). Look again.
            if "does not belong to the document" in str(exc):
                return False
            raise

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.05).until(shows)
    except TimeoutException:
        shown = [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]
        raise AssertionError(f"{css!r} did not show {text!r} within {timeout} s; "
                             f"it shows {shown!r}") from None
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def screenshot(driver: WebDriver, name: str) -> list[Path]:
    """The current page at 1280x800 and at a phone's 390x844 (device metrics emulation),
    as <artifacts>/<name>-desktop.png and <name>-phone.png; returns both paths."""
    folder = artifacts_dir()
    kept = []
    for label, (width, height), mobile in (("desktop", DESKTOP, False),
                                           ("phone", PHONE, True)):
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
        path = folder / f"{name}-{label}.png"
        path.write_bytes(driver.get_screenshot_as_png())
        kept.append(path)
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return kept


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError(f"{path} is not a PNG")
    width, height = struct.unpack(">II", head[16:24])
    return width, height


@pytest.fixture(scope="session")
def _chromium() -> Iterator[WebDriver]:
    why = unavailable()
    if why:
        pytest.skip(why)
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(_chromium: WebDriver, served: Served) -> Iterator[WebDriver]:
    """The session's browser, on a blank page with an empty console log for each test.
    It needs `served` so that it is set up after the server and left before it stops."""
    _chromium.get("about:blank")
    browser_log(_chromium)  # drained: a test sees only its own page's errors
    yield _chromium
    _chromium.get("about:blank")  # closes the page's event streams before its server stops


@pytest.fixture
def served(app: Any) -> Iterator[Served]:
    """The test module's `app` fixture (an ASGI app), served on a free loopback port."""
    running = serve(app)
    yield running
    stop(running)
