"""Replicas with the Slurm engine (issue 24): a job running in Slurm completes once across a takeover.

Two `disagg serve` replicas on one throw-away PostgreSQL, one state directory, the session's Slurm. The
leader is killed (kill -9) while the job's task runs in Slurm; the standby takes the lease, reconciles,
adopts the running Slurm job (which never noticed: slurmd runs it, not the controller) and records its
end. The task marks its start and end: one of each, one Slurm submission, the slice's node gone after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from disagg.engines.slurm import SlurmEngine, is_disagg_job
from disagg.engines.slurm_cluster import SlurmCluster
from disagg.store.pgtemp import TempPostgres, find_bin, free_port

pytestmark = pytest.mark.slurm


class Replica:
    """One `disagg serve --config` (its own session), its output in a log file."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config, self.log = config, log
        self.url = f"http://127.0.0.1:{yaml.safe_load(config.read_text())['port']}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "disagg.cli", "serve", "--config", str(self.config)],
                                         stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)

    def healthz(self) -> dict[str, object] | None:
        try:
            r = httpx.get(self.url + "/healthz", timeout=2)
        except httpx.HTTPError:
            return None
        return dict(r.json()) if r.status_code == 200 else None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def wait(cond: Callable[[], bool], what: str | Callable[[], str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what() if callable(what) else what}"
        time.sleep(0.05)


@pytest.fixture
def postgres() -> Iterator[TempPostgres]:
    if find_bin() is None:
        pytest.skip("PostgreSQL is not installed (scripts/test.sh installs it as root)")
    server = TempPostgres()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def replicas(slurm_cluster: SlurmCluster, postgres: TempPostgres, tmp_path: Path) -> Iterator[list[Replica]]:
    site = slurm_cluster.site
    machines = [{"name": n.machine, "rack": "r0", "cpus": n.cpus, "memory_gb": 64, "uplink_gbps": 40,
                 "devices": {"gpu": {"model": "P100", "count": len(n.gpus)}}} for n in site.static_nodes]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"machines": machines}))
    db = postgres.create_database("slurm_failover")
    group = []
    for name in ("a", "b"):
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump({
            "port": free_port(), "db": db, "state_dir": str(tmp_path / "state"), "replica_name": name,
            "cluster": str(tmp_path / "cluster.yaml"), "latency_scale": 0.05, "tick_s": 0.05,
            "engine": "slurm", "slurm_site": str(site.save()), "allow_jobs_on_store_disk": True,
        }))
        group.append(Replica(config, tmp_path / f"{name}.log"))
    yield group
    for r in group:
        r.kill()


def test_a_slurm_job_running_across_a_takeover_completes_once(
        replicas: list[Replica], slurm_cluster: SlurmCluster, tmp_path: Path, drop_dir: Path) -> None:
    a, b = replicas
    engine = SlurmEngine(slurm_cluster.site)
    a.start()
    wait(lambda: (a.healthz() or {}).get("role") == "leader", lambda: "a to lead: " + a.log.read_text()[-1500:])
    b.start()
    wait(lambda: (b.healthz() or {}).get("role") == "standby", lambda: "b to stand by: " + b.log.read_text()[-1500:])
    token = (tmp_path / "state" / "admin-token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}
    marks = drop_dir / "marks"  # the job runs as its tenant's user: somewhere that user may write
    r = httpx.post(a.url + "/v1/jobs", headers=headers, json={
        "name": "across", "command": ["bash", "-c", f"echo start >> {marks}; sleep 10; echo end >> {marks}"],
        "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 1}})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    def job(replica: Replica) -> dict[str, object]:
        got = httpx.get(f"{replica.url}/v1/jobs/{job_id}", headers=headers, timeout=10)
        assert got.status_code == 200, got.text
        return dict(got.json())

    wait(lambda: marks.exists() and "start" in marks.read_text(), lambda: f"the task to start: {job(a)}")
    a.kill()  # the leader dies while Slurm runs the task
    wait(lambda: (b.healthz() or {}).get("role") == "leader", lambda: "b to take over: " + b.log.read_text()[-2000:])
    assert "end" not in marks.read_text(), "the task ended before the takeover: nothing was tested"
    wait(lambda: job(b)["state"] in ("completed", "failed", "cancelled"),
         lambda: f"the job to end: {job(b)} {b.log.read_text()[-1500:]}", 90)
    final = job(b)
    assert final["state"] == "completed" and final["attempts"] == 1, final
    assert marks.read_text().split() == ["start", "end"]  # one run, not cut short, not started again
    mine = [j for j in engine._squeue() if is_disagg_job(j) and f"job={job_id} " in str(j.get("comment"))]
    assert len(mine) == 1, mine  # submitted to Slurm once
    wait(lambda: not engine.joined_machines(), lambda: f"the slice's node to leave: {engine.joined_machines()}", 40)
