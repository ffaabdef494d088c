#!/usr/bin/env python3
"""Issue 22's job-side measurements against a real `disagg serve` (as root: jobs run as the tenants'
users), printed as JSON. Run from the repository root:

    .venv/bin/python scripts/measure-job-attacks.py

  - 300 slow connections: bob's `GET /v1/jobs?limit=5` (30 requests, 0.1 s apart), idle, then while a
    job of alice (loopback-only network) and then one of carol (`network: host`) opens 300 connections
    to the API, sends half a request on each and reopens what the server cuts;
  - a job filling its disk limit (`job_disk_mb: 20`, `fallocate -l 200M`): `/healthz` answering,
    another tenant's submission and cancel, and how soon after its write the job is killed.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [".", "tests/control"]

import httpx  # noqa: E402
from control_helpers import Server, admin_token, wait_for  # noqa: E402
from tests.control.test_control_sandbox import HOLD  # noqa: E402

CONFIG = ("tenants: [{name: alice}, {name: bob}, {name: carol, network: host}]\n"
          "job_disk_mb: 20\nallow_jobs_on_store_disk: true\n")


class Measured:
    def __init__(self, root: Path) -> None:
        (root / "c.yaml").write_text(CONFIG)
        flags = ["--latency-scale", "0.002", "--tick-s", "0.02", "--round-gap-s", "0.02",
                 "--config", str(root / "c.yaml")]
        self.srv = Server(root, f"sqlite:///{root / 'd.db'}", flags)
        self.srv.start()
        self.srv.ready()
        self.url = self.srv.url
        self.admin = {"Authorization": f"Bearer {admin_token(root)}"}
        self.tok = {t: {"Authorization": "Bearer " + httpx.post(self.url + "/v1/tokens", headers=self.admin,
                                                                  json={"tenant": t}).json()["token"]}
                    for t in ("alice", "bob", "carol")}

    def submit(self, who: str, cmd: list[str]) -> str:
        r = httpx.post(self.url + "/v1/jobs", headers=self.tok[who], timeout=30, json={
            "name": "m", "command": cmd, "max_retries": 0, "tasks": {"count": 1, "cpus": 0.2, "memory_gb": 0.5}})
        return str(r.json()["id"])

    def job(self, who: str, job_id: str) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/v1/jobs/{job_id}", headers=self.tok[who], timeout=30).json())

    def logs(self, who: str, job_id: str) -> str:
        answer = httpx.get(f"{self.url}/v1/jobs/{job_id}/logs", headers=self.tok[who], timeout=30)
        return str(answer.json().get("logs", ""))

    def probe(self, n: int = 30) -> dict[str, Any]:
        lat: list[float] = []
        codes: list[object] = []
        for _ in range(n):
            t0 = time.perf_counter()
            try:
                codes.append(httpx.get(self.url + "/v1/jobs?limit=5", headers=self.tok["bob"], timeout=15).status_code)
            except httpx.HTTPError as exc:
                codes.append(type(exc).__name__)
            lat.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.1)
        return {"median_ms": round(statistics.median(lat), 1), "max_ms": round(max(lat), 1),
                "ok": sum(c == 200 for c in codes), "of": n, "other": sorted({str(c) for c in codes if c != 200})}

    def cancel_as_admin(self, job_id: str) -> None:
        for _ in range(200):
            try:
                if httpx.post(f"{self.url}/v1/jobs/{job_id}/cancel", headers=self.admin, timeout=10).status_code == 202:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)


def connections(m: Measured) -> dict[str, Any]:
    out: dict[str, Any] = {"idle": m.probe()}
    for who, net in (("alice", "loopback"), ("carol", "host_network")):
        job_id = m.submit(who, ["python3", "-c", HOLD, str(m.srv.port), "300", "60"])
        time.sleep(10)  # the API may be taken: no polling of the log meanwhile
        out[f"while_{who}_holds_300_{net}"] = m.probe()
        m.cancel_as_admin(job_id)
        out[f"{who}_log"] = m.logs(who, job_id)[:200]  # HOLDING n: how many connections the job got
        time.sleep(3)
    return out


def disk_fill(m: Measured) -> dict[str, Any]:
    hog = m.submit("alice", ["sh", "-c", "fallocate -l 200M big && echo FILLED 1; sleep 300"])
    wait_for(lambda: "FILLED" in m.logs("alice", hog), 60, "the hog to fill its disk")
    filled = time.perf_counter()
    health = []
    for _ in range(10):
        t0 = time.perf_counter()
        code = httpx.get(m.url + "/healthz", timeout=15).status_code
        health.append((code, (time.perf_counter() - t0) * 1000))
    t0 = time.perf_counter()
    other = m.submit("bob", ["sleep", "300"])
    submit_s = time.perf_counter() - t0
    wait_for(lambda: m.job("bob", other)["state"] == "running", 60, "bob's job running")
    t0 = time.perf_counter()
    code = httpx.post(f"{m.url}/v1/jobs/{other}/cancel", headers=m.tok["bob"], timeout=30).status_code
    wait_for(lambda: m.job("bob", other)["state"] == "cancelled", 60, "bob's job cancelled")
    cancel_s = time.perf_counter() - t0
    wait_for(lambda: m.job("alice", hog)["state"] == "failed", 60, "the hog killed")
    return {"healthz": [c for c, _ in health], "healthz_max_ms": round(max(x for _, x in health), 1),
            "submit_ms": round(submit_s * 1000, 1), "cancel_code": code, "cancel_to_cancelled_s": round(cancel_s, 2),
            "hog_killed_within_s_of_filling": round(time.perf_counter() - filled, 2),
            "hog_exit": m.job("alice", hog)["exit_code"],
            "note": [line for line in m.logs("alice", hog).splitlines() if "disk limit" in line]}


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="disagg-measure-jobs-"))
    root.chmod(0o755)
    m = Measured(root)
    try:
        out = {"connections": connections(m), "disk_fill": disk_fill(m), "load": os.getloadavg()}
    finally:
        m.srv.kill()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
