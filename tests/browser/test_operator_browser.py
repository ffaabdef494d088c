"""An operator's day in headless Chromium against a real `disagg serve` (issue 25): signed in as an admin,
drain a device and fail a link from the fabric page, hold and release a job from its page — each through
its confirmation page — and check the allocation figures on the fabric and queue pages against
`GET /v1/machines`. Screenshots of every step go to `test-artifacts/browser/operator-*.png`."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_dashboard_browser import Dashboard, sign_in
from tests.server_files import admin_token

from conftest import ARTIFACTS
from disagg.bench.crash import ForkedServer
from disagg.cli.serve import serve_main

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    root = tmp_path_factory.mktemp("operator")
    config = root / "disagg.yaml"
    config.write_text("history_every_s: 0.25\nlatency_scale: 0.002\ntick_s: 0.02\nround_gap_s: 0.02\n")
    # jobs' directories of its own: a concurrent test session's clean-up removes new ones under /var/lib/disagg
    jobs = Path(tempfile.mkdtemp(prefix="disagg-i25-browser-", dir="/var/tmp"))
    jobs.chmod(0o755)
    server = ForkedServer(root, f"sqlite:///{root / 'd.db'}", ["--config", str(config)], serve_main)
    os.environ["DISAGG_JOBS_DIR"] = str(jobs)
    try:
        server.start()
    finally:
        os.environ.pop("DISAGG_JOBS_DIR", None)
    try:
        server.ready()
        yield Dashboard(server, admin_token(root))
    finally:
        server.kill()
        shutil.rmtree(jobs, ignore_errors=True)


def shot(browser: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"operator-{name}.png"))


def confirm(browser: Any, day: Dashboard, link_css: str, name: str) -> None:
    """Click an action's link, check its confirmation page, screenshot it, and confirm."""
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, link_css).click()
    day.until(lambda: "/ui/confirm/" in browser.current_url, "the confirmation page")
    assert browser.find_element(By.ID, "back")  # a way back
    shot(browser, f"{name}-confirm")
    browser.find_element(By.ID, "confirm").click()
    day.until(lambda: "/ui/confirm/" not in browser.current_url, "back from the confirmation")


def allocation_matches_the_api(browser: Any, day: Dashboard) -> dict[str, int]:
    """Each machine card's cpus and memory, and the capacity header's GPUs, as GET /v1/machines has them."""
    from selenium.webdriver.common.by import By

    machines = day.api.get("/v1/machines").json()["machines"]
    for m in machines:
        if m["kind"] != "machine":
            continue
        a = m["allocation"]
        card = browser.find_element(By.CSS_SELECTOR, f'[data-node="{m["id"]}"] p.allocation')
        assert card.get_attribute("data-node-cpus") == f'{a["cpus"]["allocated"]:g}/{a["cpus"]["total"]:g}', m["id"]
        assert card.get_attribute("data-node-memory") == (
            f'{a["memory_gb"]["allocated"]:g}/{a["memory_gb"]["total"]:g}'), m["id"]
    gpus: dict[str, int] = {"used": 0, "total": 0}
    for m in machines:
        for g in m["allocation"]["devices"]:
            if g["kind"] == "gpu":
                gpus["used"] += g["used"]
                gpus["total"] += g["total"]
    shown = {"used": 0, "total": 0}
    for el in browser.find_elements(By.CSS_SELECTOR, '#capacity .capacity[data-resource^="gpu "]'):
        shown["used"] += int(el.get_attribute("data-used"))
        shown["total"] += int(el.get_attribute("data-total"))
    assert shown == gpus
    return gpus


def test_an_admin_drains_fails_holds_and_releases_and_the_figures_agree(browser: Any, day: Dashboard) -> None:
    from selenium.webdriver.common.by import By

    browser.delete_all_cookies()
    sign_in(browser, day)
    runner = day.api.post("/v1/jobs", json={"name": "runner", "command": ["sleep", "300"],
                                            "tasks": {"count": 1, "cpus": 3, "memory_gb": 6, "gpu": 2}}).json()["id"]
    day.until(lambda: day.job(runner)["state"] == "running", "the 2-GPU job to run")
    waiter = day.api.post("/v1/jobs", json={"name": "waiter", "command": ["true"],
                                            "tasks": {"count": 1, "cpus": 1, "memory_gb": 1, "gpu": 4}}).json()["id"]
    day.until(lambda: day.job(waiter)["reason_code"] not in (None, "new"), "a reason for the waiter")

    # the queue's capacity header and the fabric's cards agree with GET /v1/machines
    browser.get(day.url + "/ui/queue")
    header = browser.find_element(By.ID, "capacity").text
    assert "cpus: 3/" in header and "gpu" in header
    shot(browser, "queue")
    browser.get(day.url + "/ui/fabric")
    gpus = allocation_matches_the_api(browser, day)
    assert gpus["used"] == 2
    shot(browser, "fabric-before")

    # drain a free device
    device = next(d["id"] for d in day.api.get("/v1/devices").json()["devices"]
                  if d["state"] == "free" and d["kind"] == "gpu")
    confirm(browser, day, f'a[data-act="device-drain-{device}"]', "drain")
    assert browser.current_url == day.url + "/ui/fabric"
    drained = {d["id"]: d for d in day.api.get("/v1/devices").json()["devices"]}[device]
    assert drained["drained"] and drained["state"] == "drained"
    assert browser.find_elements(By.CSS_SELECTOR, f'a[data-act="device-repair-{device}"]')

    # fail the uplink of a machine the running job does not use
    used = day.job(runner)["placement"][0]["machine"]
    node = next(n for n in ("node3", "node2", "node1", "node0") if n != used)
    confirm(browser, day, f'a[data-act="link-fail-up:{node}"]', "fail-link")
    links = {lk["id"]: lk for lk in day.api.get("/v1/links").json()["links"]}
    assert links[f"up:{node}"]["state"] == "down"
    assert f"up:{node} is down" in browser.find_element(By.ID, "attention").text
    allocation_matches_the_api(browser, day)
    shot(browser, "fabric-after")

    # hold, then release, the waiting job from its page
    browser.get(day.url + f"/ui/jobs/{waiter}")
    confirm(browser, day, "#hold", "hold")
    assert browser.find_element(By.ID, "job-state").text == "held" == day.job(waiter)["state"]
    shot(browser, "job-held")
    browser.get(day.url + "/ui/queue")
    assert browser.find_element(By.CSS_SELECTOR, f'#waiting tr[data-job="{waiter}"]').get_attribute(
        "data-state") == "held"
    browser.get(day.url + f"/ui/jobs/{waiter}")
    confirm(browser, day, "#release", "release")
    assert day.job(waiter)["state"] == "queued"  # 4 GPUs are not free: it waits again
    assert browser.find_element(By.ID, "job-state").text == "queued"
    events = [e["why"] for e in day.api.get(f"/v1/jobs/{waiter}/events").json()["events"]]
    assert "held by admin" in events and "released by admin" in events
    shot(browser, "job-released")

    # the charts: a capacity line, and the link's fault marked, then its repair
    day.api.post(f"/v1/links/up:{node}/repair")
    day.api.post(f"/v1/devices/{device}/repair")

    def marked() -> bool:
        browser.get(day.url + "/ui/history")
        return bool(browser.find_elements(By.CSS_SELECTOR, '[id^="chart-devices-mark-repair-"]'))
    day.until(marked, "the repair marked on the devices chart")
    assert browser.find_elements(By.CSS_SELECTOR, '[id^="chart-devices-mark-fault-"]')
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-devices-gpu-in-all")
    assert "here" in browser.find_element(By.CSS_SELECTOR, 'a[href="?window=15m"]').get_attribute("class")
    shot(browser, "history")
