"""kill -9 of `disagg serve` (engine: slurm) while a slice composes: the same guarantees as with local
processes. After a restart the job runs exactly once, and Slurm is left as it was: no slice node, no
disagg job, every static node's GPUs as before, nothing attached on the fabric.

Three moments are hit: while devices are attached (before any Slurm node exists), after the slice's
node joined Slurm, and after its job is in Slurm's queue (held, or released but kept from starting by
a down partition). Each restart reconciles and resumes.
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

from disagg.engines.slurm import JOB_PREFIX, SlurmEngine, is_disagg_job
from disagg.engines.slurm_cluster import SlurmCluster
from disagg.engines.slurm_site import SlurmSite
from disagg.fabric.emulated import EmulatedFabric
from disagg.model import load_cluster
from disagg.store.pgtemp import free_port

pytestmark = pytest.mark.slurm


class Serve:
    """`disagg serve --config CONFIG` as a child process (its own session), killed with SIGKILL."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config, self.log = config, log
        self.port = int(yaml.safe_load(config.read_text())["port"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str | None:
        """Start and wait for /healthz; returns the admin token if this start printed one."""
        out = open(self.log, "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen([sys.executable, "-m", "disagg.cli", "serve", "--config", str(self.config)],
                                     stdout=subprocess.PIPE, stderr=out, start_new_session=True)
        out.close()
        assert self.proc.stdout is not None
        token = None
        deadline = time.monotonic() + 30
        line = self.proc.stdout.readline().decode()
        if line.startswith("admin token written to "):  # the path of a 0600 file, never the token itself
            token = Path(line.removeprefix("admin token written to ").split(" (mode")[0]).read_text().strip()
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return token
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError("disagg serve did not come up: " + self.log.read_text()[-2000:])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def serve(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Serve]:
    site = slurm_cluster.site
    machines = [{"name": n.machine, "rack": "r0", "cpus": n.cpus, "memory_gb": 64, "uplink_gbps": 40,
                 "devices": {"gpu": {"model": "P100", "count": len(n.gpus)}}} for n in site.static_nodes]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({
        "machines": machines,
        "pools": [{"name": "pool0", "rack": "r0", "uplink_gbps": 40,
                   "devices": {"gpu": {"model": "P100", "count": 4}}}],
    }))
    config = tmp_path / "disagg.yaml"
    config.write_text(yaml.safe_dump({
        "port": free_port(), "db": f"sqlite:///{tmp_path / 'disagg.db'}", "state_dir": str(tmp_path / "state"),
        "cluster": str(tmp_path / "cluster.yaml"), "latency_scale": 0.05, "tick_s": 0.05,
        "engine": "slurm", "slurm_site": str(site.save()),
    }))
    server = Serve(config, tmp_path / "serve.log")
    yield server
    server.kill()
    set_partition(site, "up")


def set_partition(site: SlurmSite, state: str) -> None:
    site.run(["scontrol", "update", f"partitionname={site.partition}", f"state={state}"])


def wait(cond: Callable[[], bool], what: str | Callable[[], str], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what() if callable(what) else what}"
        time.sleep(0.02)


@pytest.mark.parametrize("moment", ["attaching", "node-joined", "job-queued"])
def test_kill_9_mid_composition_runs_the_job_exactly_once(
    moment: str, serve: Serve, slurm_cluster: SlurmCluster, tmp_path: Path, drop_dir: Path
) -> None:
    site = slurm_cluster.site
    engine = SlurmEngine(site)
    before = engine.node_gres()
    runs = drop_dir / "runs"   # the job runs as its tenant's user: somewhere that user may write
    # The slices' partition is down until the server is killed: Slurm takes the job (held or released)
    # but cannot start it, so "killed before the job ran" holds whatever the server did in between
    # (a released job starts in ≈ 0.5 s, which a loaded machine can beat the kill by).
    set_partition(site, "down")
    token = serve.start()
    assert token
    headers = {"Authorization": f"Bearer {token}"}
    r = httpx.post(serve.url + "/v1/jobs", headers=headers, json={
        "name": "once", "command": ["bash", "-c", f"echo $SLURMD_NODENAME >> {runs}"],
        "tasks": {"count": 2, "cpus": 1.0, "memory_gb": 1.0, "gpu": 2}})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    def job() -> dict[str, object]:
        r = httpx.get(f"{serve.url}/v1/jobs/{job_id}", headers=headers)
        assert r.status_code == 200, (r.status_code, r.text, serve.log.read_text()[-2000:])
        out: dict[str, object] = r.json()
        return out

    def disagg_in_squeue() -> list[dict[str, object]]:
        return [j for j in engine._squeue() if is_disagg_job(j) and j.get("job_state") in ("PENDING", "RUNNING")]

    if moment == "attaching":
        wait(lambda: job()["state"] == "composing", "composing")
    elif moment == "node-joined":
        wait(lambda: bool(engine.joined_machines()), "a slice node to join")
    else:
        wait(lambda: bool(disagg_in_squeue()), "the job in squeue")
    serve.kill()
    assert not runs.exists()                       # killed before the job could run
    set_partition(site, "up")

    serve.start()
    wait(lambda: job()["state"] in ("completed", "failed", "cancelled"), "the job to end", 60)
    final = job()
    assert final["state"] == "completed", final
    assert final["attempts"] == 1, final           # the slice was resumed where it was, not given up
    assert len(runs.read_text().split()) == 2      # two tasks, one run: nothing ran twice
    wait(lambda: not engine.joined_machines() and engine.node_gres() == before,
         lambda: f"slice nodes to leave: joined {engine.joined_machines()}, gres {engine.node_gres()}, "
                 f"server log {serve.log.read_text()[-1500:]}", 40)
    assert disagg_in_squeue() == []
    mine = [str(j["name"]) for j in engine._squeue()
            if is_disagg_job(j) and f"job={job_id} " in str(j.get("comment"))]
    assert len(mine) == 1 and mine[0] == f"{JOB_PREFIX}{final['slice']}"          # submitted to Slurm once
    serve.kill()
    fabric = EmulatedFabric(tmp_path / "state" / "fabric.db", load_cluster(tmp_path / "cluster.yaml"))
    assert fabric.attachments() == []


def test_a_start_on_the_local_engine_refuses_while_slurm_runs_the_jobs(
    serve: Serve, slurm_cluster: SlurmCluster, tmp_path: Path, drop_dir: Path
) -> None:
    """`engine: slurm` changed to `local` between two starts while a job ran under Slurm: the local engine
    found no such job and re-queued it, and it ran a second time as a local process while Slurm's run went
    on. Now the start is refused (exit 2), naming the slice and both engines; Slurm's job is untouched, and
    the Slurm start that follows adopts it."""
    engine = SlurmEngine(slurm_cluster.site)
    runs = drop_dir / "twice"
    token = serve.start()
    assert token
    headers = {"Authorization": f"Bearer {token}"}
    r = httpx.post(serve.url + "/v1/jobs", headers=headers, json={
        "name": "long", "command": ["bash", "-c", f"echo run >> {runs}; sleep 120"],
        "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 1}})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    def job() -> dict[str, object]:
        out: dict[str, object] = httpx.get(f"{serve.url}/v1/jobs/{job_id}", headers=headers).json()
        return out

    wait(lambda: job()["state"] == "running" and runs.exists(), "the job to run under Slurm", 60)
    slice_id = job()["slice"]
    time.sleep(1.2)  # the loop writes the store's mark at most every second
    serve.kill()
    settings = yaml.safe_load(serve.config.read_text())
    local = tmp_path / "local.yaml"
    local.write_text(yaml.safe_dump({**settings, "engine": "local", "slurm_site": None}))
    done = subprocess.run([sys.executable, "-m", "disagg.cli", "serve", "--config", str(local)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"live slices ({slice_id}) run on engine 'slurm', and this start uses engine 'local'" in done.stderr
    time.sleep(1.0)
    assert runs.read_text().split() == ["run"]      # nothing ran a second time
    mine = [j for j in engine._squeue() if is_disagg_job(j) and f"job={job_id} " in str(j.get("comment"))]
    assert [j.get("job_state") for j in mine] == ["RUNNING"]
    serve.start()                                   # the engine that runs it adopts it
    assert job()["state"] == "running" and job()["slice"] == slice_id
    assert httpx.post(f"{serve.url}/v1/jobs/{job_id}/cancel", headers=headers).status_code == 202
    wait(lambda: job()["state"] == "cancelled", "the job to be cancelled", 60)
    wait(lambda: not engine.joined_machines(), "the slice node to leave", 40)
