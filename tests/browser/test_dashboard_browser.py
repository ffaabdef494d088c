"""The dashboard as an operator uses it, in headless Chromium against a real `disagg serve`: sign in,
the queue with a waiting job's reason, a job's steps and its re-queue after a device fault, a dropped
link on the fabric page, a chart with data points, the API docs — and not one request that leaves
the server's origin. Run alone with `pytest -m browser`."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from browser_helpers import requested_urls
from tests.server_files import admin_token

from disagg.bench.crash import ForkedServer
from disagg.cli.serve import serve_main

pytestmark = pytest.mark.browser

WAIT_S = 30


class Dashboard:
    """The server under test, an admin's API client, and every URL the browser requested."""

    def __init__(self, server: ForkedServer, token: str) -> None:
        self.server, self.url, self.token = server, server.url, token
        self.api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        self.urls: list[str] = []

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.api.get(f"/v1/jobs/{job_id}").json())

    def until(self, predicate: Any, what: str, timeout: float = WAIT_S) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            value = predicate()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="module")
def dash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    root = tmp_path_factory.mktemp("serve")
    config = root / "disagg.yaml"
    config.write_text("history_every_s: 0.25\nlatency_scale: 0.002\ntick_s: 0.02\nround_gap_s: 0.02\n")
    server = ForkedServer(root, f"sqlite:///{root / 'd.db'}", ["--config", str(config)], serve_main)
    server.start()
    try:
        server.ready()
        token = admin_token(root)
        yield Dashboard(server, token)
    finally:
        server.kill()


@pytest.fixture(scope="module")
def jobs(dash: Dashboard) -> dict[str, str]:
    """A job holding four of the five GPUs (running), and one asking for two (waiting, with a reason)."""
    hog = dash.api.post("/v1/jobs", json={"name": "hog", "command": ["sleep", "300"], "max_retries": 5,
                                          "tasks": {"count": 1, "cpus": 2, "memory_gb": 4, "gpu": 4}}).json()["id"]
    dash.until(lambda: dash.job(hog)["state"] == "running", "the 4-GPU job to run")
    waiter = dash.api.post("/v1/jobs", json={"name": "waiter", "command": ["true"],
                                             "tasks": {"count": 1, "cpus": 1, "memory_gb": 1, "gpu": 2}}).json()["id"]
    dash.until(lambda: dash.job(waiter)["reason_code"] not in (None, "new"), "the policy's reason for the waiter")
    return {"hog": hog, "waiter": waiter}


def sign_in(browser: Any, dash: Dashboard) -> None:
    """Sign in through the form, unless this browser already has a session."""
    from selenium.webdriver.common.by import By

    browser.get(dash.url + "/")
    if "/login" in browser.current_url:
        browser.find_element(By.ID, "token").send_keys(dash.token)
        browser.find_element(By.ID, "sign-in").click()
        dash.until(lambda: "/ui/queue" in browser.current_url, "the queue page after signing in")


def _wait_text(browser: Any, css: str, pattern: str, timeout: float = WAIT_S) -> str:
    """Wait until the element's text matches `pattern` (the page updates itself; no reload)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def found(driver: Any) -> str | bool:
        try:
            text = str(driver.find_element(By.CSS_SELECTOR, css).text)
        except Exception:
            return False
        return text if re.search(pattern, text) else False

    return str(WebDriverWait(browser, timeout, poll_frequency=0.2).until(found))


def test_sign_in_with_a_token(browser: Any, dash: Dashboard) -> None:
    from selenium.webdriver.common.by import By

    browser.delete_all_cookies()
    browser.get(dash.url + "/")
    assert browser.current_url.startswith(dash.url + "/login")
    browser.find_element(By.ID, "token").send_keys("dg_not-a-token")
    browser.find_element(By.ID, "sign-in").click()
    _wait_text(browser, ".error", "That token is not valid")
    browser.find_element(By.ID, "token").send_keys(dash.token)
    browser.find_element(By.ID, "sign-in").click()
    dash.until(lambda: browser.current_url == dash.url + "/ui/queue", "the queue page after signing in")
    assert "admin" in browser.find_element(By.CSS_SELECTOR, "header .who").text
    cookie = browser.get_cookie("disagg_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    dash.urls += requested_urls(browser)


def test_the_queue_shows_a_waiting_job_with_the_policys_reason(browser: Any, dash: Dashboard,
                                                               jobs: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, dash)
    hog, waiter = jobs["hog"], jobs["waiter"]
    reason = dash.job(waiter)["reason"]
    assert reason
    # filters: only running jobs
    browser.get(dash.url + "/ui/queue?state=running")
    assert not browser.find_elements(By.CSS_SELECTOR, f'#waiting tr[data-job="{waiter}"]')
    assert browser.find_elements(By.CSS_SELECTOR, f'#live-jobs tr[data-job="{hog}"]')
    browser.get(dash.url + "/ui/queue")
    row = browser.find_element(By.CSS_SELECTOR, f'#waiting tr[data-job="{waiter}"]')
    assert waiter in row.text and "admin" in row.text and "1 × (1 cpu, 1 GB, 2 gpu)" in row.text
    assert reason in row.find_element(By.CSS_SELECTOR, "td.reason").text
    running = browser.find_element(By.CSS_SELECTOR, f'#live-jobs tr[data-job="{hog}"]')
    assert "running" in running.text
    dash.urls += requested_urls(browser)


def test_a_job_page_shows_its_steps_and_the_requeue_after_a_device_fault(browser: Any, dash: Dashboard,
                                                                         jobs: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, dash)
    hog = jobs["hog"]
    browser.get(dash.url + f"/ui/jobs/{hog[:8]}")  # a unique beginning of the id is enough
    assert browser.find_element(By.ID, "job-id").text == hog
    ops = [li.get_attribute("data-op") for li in browser.find_elements(By.CSS_SELECTOR, "#steps li.step")]
    assert {"attach-device", "launch-machine", "prepare-task", "launch-task"} <= set(ops), ops
    assert all(re.search(r"\d s$|\d s \(", li.find_element(By.CSS_SELECTOR, ".dur").text)
               for li in browser.find_elements(By.CSS_SELECTOR, "#steps li.step"))
    placement = browser.find_element(By.ID, "placement").text
    device = dash.job(hog)["placement"][0]["devices"][0]["id"]
    assert device in placement and "remote" in placement and "Gbit/s" in placement
    failed = dash.api.post(f"/v1/devices/{device}/fail")
    assert failed.status_code == 200
    # the page updates itself: the event appears without a reload
    text = _wait_text(browser, "#events", rf"re-queued: device {re.escape(device)} failed")
    assert "running → queued" in text
    dash.urls += requested_urls(browser)


def test_the_fabric_shows_a_failed_link(browser: Any, dash: Dashboard, jobs: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, dash)
    dash.until(lambda: dash.job(jobs["hog"])["state"] == "running", "the 4-GPU job to hold its devices")
    # drop the uplink of a machine the running job does not use (its slice would be torn down otherwise)
    used = dash.job(jobs["hog"])["placement"][0]["machine"]
    node = next(n for n in ("node3", "node2", "node1", "node0") if n != used)
    link = f"up:{node}"
    assert dash.api.post(f"/v1/links/{link}/fail").json()["state"] == "down"
    browser.get(dash.url + "/ui/fabric")
    alarm = browser.find_element(By.ID, "attention")
    assert "alarm" in alarm.get_attribute("class") and f"{link} is down" in alarm.text
    card = browser.find_element(By.CSS_SELECTOR, f'[data-node="{node}"]')
    assert "unreachable" in card.get_attribute("class") and f"unreachable: {link} is down" in card.text
    assert "DOWN" in card.find_element(By.CSS_SELECTOR, f'[data-link="{link}"]').text
    pool = browser.find_element(By.CSS_SELECTOR, '[data-node="iobox0"]')
    attached = len(pool.find_elements(By.CSS_SELECTOR, "li.device.attached"))
    assert attached == 4 and "4 of 5 attached" in pool.text  # a pool's word comes from its devices
    dash.api.post(f"/v1/links/{link}/repair")
    dash.urls += requested_urls(browser)


def test_a_chart_has_data_points(browser: Any, dash: Dashboard, jobs: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, dash)
    # the page's 15-minute window has buckets of 7.5 s, aligned to the window's start, which moves with
    # each load: two samples in two of the API's buckets may share one of the page's, so load it again
    # until the page itself shows two (the loop samples every second, so a few loads at most)
    queued = "#chart-queue g#chart-queue-queued use"

    def page_points() -> int:
        browser.get(dash.url + "/ui/history?window=15m")
        return len(browser.find_elements(By.CSS_SELECTOR, queued))

    dash.until(lambda: page_points() >= 2, "points in two of the page's buckets")
    points = browser.find_elements(By.CSS_SELECTOR, queued)
    assert len(points) >= 2
    gpus = browser.find_elements(By.CSS_SELECTOR, "#chart-devices g#chart-devices-gpu use")
    assert len(gpus) == len(points)
    assert browser.find_element(By.CSS_SELECTOR, "#chart-devices").size["width"] > 300
    dash.urls += requested_urls(browser)


def test_an_unknown_job_is_a_page_with_a_link_back(browser: Any, dash: Dashboard) -> None:
    """A browser that asks for a job that is not there sees the dashboard's layout, the message and a
    way back, not the API's JSON."""
    from selenium.webdriver.common.by import By

    sign_in(browser, dash)
    browser.get(dash.url + "/ui/jobs/j-nope")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Not found"
    assert "no job 'j-nope'" in browser.find_element(By.CSS_SELECTOR, ".error").text
    assert "admin" in browser.find_element(By.CSS_SELECTOR, "header .who").text
    browser.find_element(By.ID, "back").click()
    dash.until(lambda: browser.current_url == dash.url + "/ui/queue", "the queue after the link back")
    dash.urls += requested_urls(browser)


def test_the_api_docs_render_offline(browser: Any, dash: Dashboard) -> None:
    browser.get(dash.url + "/docs")  # no sign-in: the API's documentation is public, as /openapi.json is
    assert "disagg" in _wait_text(browser, ".swagger-ui .info", "disagg")
    _wait_text(browser, ".swagger-ui", r"/v1/jobs/\{job_id\}/cancel")
    browser.get(dash.url + "/redoc")
    _wait_text(browser, "body", r"Submit a job")
    dash.urls += requested_urls(browser)


def test_no_request_left_the_origin(browser: Any, dash: Dashboard, jobs: dict[str, str]) -> None:
    """Everything every page loads comes from the server itself: no CDN, no font service, no validator
    badge. (The browser's own `chrome://` pages — the blank tab it starts with — and inline `data:`
    URLs are not requests to anyone.) Each page is given time for its scripts' own requests."""
    sign_in(browser, dash)
    requested_urls(browser)
    for page in ("/ui/queue", f"/ui/jobs/{jobs['hog']}", "/ui/fabric", "/ui/history", "/ui/jobs/j-nope", "/docs",
                 "/redoc"):
        browser.get(dash.url + page)
        time.sleep(2.5)  # the log tail's first fetches, Swagger UI's and ReDoc's spec and workers
        dash.urls += requested_urls(browser)
    ours = [u for u in dash.urls if u.startswith(dash.url + "/")]
    assert any("/static-offline-docs/swagger-ui-bundle.js" in u for u in ours)
    assert any(u.endswith(f"/ui/jobs/{jobs['hog']}/log") for u in ours)
    own = (dash.url + "/", "data:", "blob:", "about:", "chrome:", "chrome-untrusted:")
    foreign = sorted({u for u in dash.urls if not u.startswith(own)})
    assert foreign == []
