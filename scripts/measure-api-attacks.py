#!/usr/bin/env python3
"""Issue 22's API measurements against a real `disagg serve` (as root: jobs run as the tenants' users),
printed as JSON. Run it with the code to measure on PYTHONPATH (a checkout's `src`):

    PYTHONPATH=src .venv/bin/python scripts/measure-api-attacks.py [--new] [--skip-flood | --only-flood]

  - log tail: the API process's peak RSS (VmHWM) while three dashboard clients each tail a 64 MiB log of
    `\\xff` (GET /ui/jobs/<id>/log, 5 times each, at once);
  - Redfish logins: the API's RSS before and after 3,000 logins of one tenant;
  - flood: a trivial job's latency (submit → completed) for bob, idle and while alice floods 1,000 GPU jobs
    (5 run, the rest queue) and 300 compositions (as fast as the API takes them, honouring Retry-After).

`--new`: the config keys this branch adds (a composition cap that lets alice make 300); leave it out for
code from before them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

BLOCKS = "/redfish/v1/CompositionService/ResourceBlocks"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) // 1024  # MB
    return out


def _cluster(path: Path) -> None:
    machines = [{"name": f"node{i}", "rack": f"r{i % 4}", "cpus": 24, "memory_gb": 128, "uplink_gbps": 40}
                for i in range(32)]
    pools = [{"name": "iobox0", "rack": "r0", "uplink_gbps": 40, "devices": {"gpu": {"model": "P100", "count": 5}}}]
    path.write_text(yaml.safe_dump({"machines": machines, "pools": pools, "network": {"rack_uplink_gbps": 400}}))


class Served:
    def __init__(self, root: Path, new: bool) -> None:
        self.root = root
        _cluster(root / "cluster.yaml")
        # the jobs' directories of its own (test sessions clean /var/lib/disagg/jobs of what they did not make)
        config: dict[str, Any] = {"tenants": [{"name": "alice"}, {"name": "bob"}], "log_cap_mb": 80,
                                  "jobs_dir": str(root / "jobs"), "allow_jobs_on_store_disk": True}
        if new:
            config.update(max_compositions_per_tenant=400)
        (root / "disagg.yaml").write_text(yaml.safe_dump(config))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log = open(root / "server.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "disagg.cli", "serve", "--db", f"sqlite:///{root / 'd.db'}", "--port",
             str(self.port), "--state-dir", str(root / "state"), "--config", str(root / "disagg.yaml"),
             "--cluster", str(root / "cluster.yaml"), "--latency-scale", "0.01"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        end = time.monotonic() + 90
        while time.monotonic() < end:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        text = (root / "server.log").read_text()
        if "admin token written to " not in text:
            raise SystemExit(f"disagg serve did not start:\n{text[-3000:]}")
        admin = Path(text.split("admin token written to ")[1].split(" (mode")[0]).read_text().strip()
        self.h = {"admin": {"Authorization": f"Bearer {admin}"}}
        self.tokens = {}
        for t in ("alice", "bob"):
            r = httpx.post(self.url + "/v1/tokens", headers=self.h["admin"], json={"tenant": t}, timeout=10)
            self.tokens[t] = r.json()["token"]
            self.h[t] = {"Authorization": f"Bearer {self.tokens[t]}"}

    def submit(self, who: str, command: list[str], gpu: int = 0, cpus: float = 0.5) -> httpx.Response:
        body = {"name": "m", "command": command, "max_retries": 0,
                "tasks": {"count": 1, "cpus": cpus, "memory_gb": 0.5, "gpu": gpu}}
        return httpx.post(self.url + "/v1/jobs", headers=self.h[who], json=body, timeout=30)

    def state(self, who: str, job: str) -> str:
        return str(httpx.get(f"{self.url}/v1/jobs/{job}", headers=self.h[who], timeout=30).json()["state"])

    def wait(self, who: str, job: str, timeout: float = 300) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.state(who, job) not in ("completed", "failed", "cancelled"):
            time.sleep(0.05)

    def close(self) -> None:
        os.killpg(self.proc.pid, 9)
        self.proc.wait()


def log_tail(s: Served) -> dict[str, Any]:
    job = s.submit("alice", ["python3", "-c", "import sys; sys.stdout.buffer.write(b'\\xff' * (64 << 20))"]).json()
    s.wait("alice", job["id"])
    before = _status(s.proc.pid)

    def tail() -> None:
        with httpx.Client(base_url=s.url, timeout=120) as c:
            c.post("/login", data={"token": s.tokens["alice"]})
            for _ in range(5):
                c.get(f"/ui/jobs/{job['id']}/log")

    threads = [threading.Thread(target=tail) for _ in range(3)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"api_mb_before": before, "api_mb_after_3x5_tails": _status(s.proc.pid),
            "tails_s": round(time.monotonic() - t0, 2)}


def logins(s: Served) -> dict[str, Any]:
    before = _status(s.proc.pid)
    with httpx.Client(base_url=s.url, timeout=30) as c:
        for _ in range(3000):
            c.post("/redfish/v1/SessionService/Sessions", json={"UserName": "alice", "Password": s.tokens["alice"]})
        listed = len(c.get("/redfish/v1/SessionService/Sessions", headers=s.h["admin"]).json()["Members"])
    return {"api_mb_before": before, "api_mb_after_3000_logins": _status(s.proc.pid), "sessions_listed": listed}


def _trivial(s: Served) -> float:
    t0 = time.monotonic()
    r = s.submit("bob", ["true"])
    while r.status_code == 429:
        time.sleep(float(r.headers.get("Retry-After", "1")))
        r = s.submit("bob", ["true"])
    s.wait("bob", r.json()["id"])
    return time.monotonic() - t0


def flood(s: Served) -> dict[str, Any]:
    idle = [_trivial(s) for _ in range(3)]
    stop = threading.Event()
    counts = {"jobs": 0, "compositions": 0, "429": 0}

    def jobs() -> None:
        while counts["jobs"] < 1000 and not stop.is_set():
            r = s.submit("alice", ["sleep", "600"], gpu=1, cpus=0.1)
            if r.status_code == 429:
                counts["429"] += 1
                time.sleep(min(float(r.headers.get("Retry-After", "1")), 2))
            elif r.status_code == 201:
                counts["jobs"] += 1

    def compositions() -> None:
        with httpx.Client(base_url=s.url, headers=s.h["alice"], timeout=30) as c:
            while counts["compositions"] < 300 and not stop.is_set():
                n = counts["compositions"]
                r = c.post("/redfish/v1/Systems", json={
                    "Name": f"f{n}", "Links": {"ResourceBlocks": [{"@odata.id": f"{BLOCKS}/node{n % 32}"}]},
                    "ProcessorSummary": {"CoreCount": 1}, "MemorySummary": {"TotalSystemMemoryGiB": 1}})
                if r.status_code == 429:
                    counts["429"] += 1
                    time.sleep(min(float(r.headers.get("Retry-After", "1")), 2))
                elif r.status_code == 202:
                    counts["compositions"] += 1
                else:
                    counts.setdefault(f"compose_{r.status_code}", 0)
                    counts[f"compose_{r.status_code}"] += 1
                    counts.setdefault("compose_refusal", r.text[:300])
                    if r.status_code != 429:
                        break

    # several clients at once, as an attacker would: the API (and, before the fair order, the workers) see
    # the flood as fast as it can be sent
    flooders = [threading.Thread(target=jobs) for _ in range(4)] + [threading.Thread(target=compositions)
                                                                     for _ in range(8)]
    t0 = time.monotonic()
    for t in flooders:
        t.start()
    time.sleep(1.0)
    during = []
    while any(t.is_alive() for t in flooders) and time.monotonic() - t0 < 150:
        during.append(_trivial(s))
        time.sleep(0.5)
    during.append(_trivial(s))  # right after the flood entered: its slices still being composed
    stop.set()
    for t in flooders:
        t.join()
    return {"idle_s": [round(x, 2) for x in idle], "during_flood_s": [round(x, 2) for x in during],
            "ratio_median": round(statistics.median(during) / statistics.median(idle), 2),
            "ratio_max": round(max(during) / statistics.median(idle), 2), "flood": counts,
            "flood_entered_s": round(time.monotonic() - t0, 1)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--new", action="store_true")
    p.add_argument("--skip-flood", action="store_true")
    p.add_argument("--only-flood", action="store_true")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="disagg-measure-"))
    root.chmod(0o755)
    s = Served(root, args.new)
    try:
        out: dict[str, Any] = {} if args.only_flood else {"log_tail": log_tail(s), "redfish_logins": logins(s)}
        if not args.skip_flood:
            out["flood"] = flood(s)
    finally:
        s.close()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
