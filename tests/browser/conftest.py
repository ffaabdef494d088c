"""The dashboard in a real browser: Debian's headless Chromium driven through Selenium (chromedriver).

One `disagg serve` (forked, fast emulated latencies, history sampled every 0.25 s) and one browser for
the module. Every request the browser makes is read from Chrome's performance log, so a test can
check that nothing was fetched from anywhere but the server itself. A failing test leaves a
screenshot of the page in `test-artifacts/browser/` (DISAGG_ARTIFACTS elsewhere);
DISAGG_SCREENSHOTS=1 keeps one of every test, passed or not.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("DISAGG_ARTIFACTS", ROOT / "test-artifacts")) / "browser"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
#: The flags that make Chromium work here: headless, no sandbox (root, no namespaces), no GPU, and
#: nothing of its own on the network (no QUIC, no background fetches, no component updates, no sync).
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1800")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the test, for the screenshot-on-failure fixture."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A headless Chromium with a fresh profile and the performance log on."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Chromium is not installed (apt-get install chromium chromium-driver; scripts/test.sh does it)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(autouse=True)
def _screenshot_on_failure(request: pytest.FixtureRequest, browser: Any) -> Iterator[None]:
    yield
    failed = any(getattr(getattr(request.node, f"rep_{w}", None), "failed", False) for w in ("setup", "call"))
    if failed or os.environ.get("DISAGG_SCREENSHOTS"):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / f"{request.node.name}{'-FAILED' if failed else ''}.png"))
        (ARTIFACTS / f"{request.node.name}.html").write_text(browser.page_source)
