"""End to end: jobs submitted through the REST API run on Slurm, on slices composed for them.

The controller runs with `engine: slurm` on the session's throw-away Slurm. Users' own `sbatch`
jobs hold three of the four GPUs of every static node first, so disagg must (a) keep those GPUs away
from its policy (no double booking) and (b) compose 2-GPU tasks from the one free local GPU and
remote pool GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from disagg.api import create_app
from disagg.control.config import Config
from disagg.control.service import Service, open_service
from disagg.engines.slurm import JOB_PREFIX, SlurmEngine
from disagg.engines.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm

REPORT = ["bash", "-c", 'echo "rank=$SLURM_PROCID node=$SLURMD_NODENAME devices=$DISAGG_DEVICES"']


def cluster_spec(cluster: SlurmCluster, path: Path) -> Path:
    """The controller's inventory: the Slurm site's static nodes as machines, plus a pool of 4 GPUs."""
    machines = [{"name": n.machine, "rack": "r0", "cpus": n.cpus, "memory_gb": 64, "uplink_gbps": 40,
                 "devices": {"gpu": {"model": "P100", "count": len(n.gpus)}}}
                for n in cluster.site.static_nodes]
    spec = {"machines": machines,
            "pools": [{"name": "pool0", "rack": "r0", "uplink_gbps": 40,
                       "devices": {"gpu": {"model": "P100", "count": 4}}}],
            "network": {"rack_uplink_gbps": 100}}
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def slurm_service(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Service]:
    settings = Config(db=f"sqlite:///{tmp_path / 'disagg.db'}",
                        cluster=str(cluster_spec(slurm_cluster, tmp_path / "cluster.yaml")),
                        state_dir=str(tmp_path / "state"), latency_scale=0.002, tick_s=0.05,
                        engine="slurm", slurm_site=str(slurm_cluster.site.save()))
    svc = open_service(settings)
    assert isinstance(svc.engine, SlurmEngine)
    svc.controller.start()
    yield svc
    svc.close()


def wait_job(client: TestClient, headers: dict[str, str], job_id: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
        if job["state"] in ("completed", "failed", "cancelled"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} not done after {timeout_s} s: {job}")


def test_rest_jobs_run_on_slurm_slices_beside_users_own_jobs(
    slurm_cluster: SlurmCluster, slurm_service: Service
) -> None:
    site = slurm_cluster.site
    engine = slurm_service.engine
    assert isinstance(engine, SlurmEngine)
    before = engine.node_gres()
    # users' own jobs, outside disagg: 3 GPUs of each static node
    foreign = [site.run(["sbatch", "--parsable", "-p", "static", "-w", n.name, "--gres=gpu:3", "-o", "/dev/null",
                         "--wrap", "sleep 300"]).stdout.strip() for n in site.static_nodes]
    try:
        deadline = time.monotonic() + 60
        while len(engine.foreign_holdings()) < len(foreign):
            assert time.monotonic() < deadline, engine.foreign_holdings()
            time.sleep(0.1)
        held = {d for h in engine.foreign_holdings() for d in h.devices}
        assert len(held) == 3 * len(foreign)

        token = slurm_service.store.create_token("alice")
        headers = {"Authorization": f"Bearer {token}"}
        with TestClient(create_app(slurm_service.jobs)) as client:
            ids = {}
            for name, count in (("one", 1), ("two", 2)):
                r = client.post("/v1/jobs", headers=headers, json={
                    "name": name, "command": REPORT,
                    "tasks": {"count": count, "cpus": 1.0, "memory_gb": 1.0, "gpu": 2}})
                assert r.status_code == 201, r.text
                ids[name] = r.json()["id"]
            jobs = {name: wait_job(client, headers, jid) for name, jid in ids.items()}
            logs = {name: client.get(f"/v1/jobs/{jid}/logs", headers=headers).json()["logs"]
                    for name, jid in ids.items()}

        for name, count in (("one", 1), ("two", 2)):
            job = jobs[name]
            assert job["state"] == "completed", (job, logs[name])
            placement = job["placement"]
            assert len(placement) == count
            composed = {tuple(d["id"] for d in t["devices"]) for t in placement}
            lines = [dict(p.split("=", 1) for p in line.split()) for line in logs[name].splitlines()
                     if line.startswith("rank=")]
            assert len(lines) == count, logs[name]
            # each task saw exactly the devices its slice machine composed, on its own Slurm node
            assert {tuple(x["devices"].split(",")) for x in lines} == composed
            assert all(x["node"].startswith(job["slice"]) for x in lines)
            assert len({x["node"] for x in lines}) == count
            used = {d for t in composed for d in t}
            assert not used & held, f"double booking: {used & held}"
        remote = [d for name in jobs for t in jobs[name]["placement"] for d in t["devices"] if d["remote"]]
        assert remote, "with 1 free local GPU per machine, 2-GPU tasks need remote ones"

        deadline = time.monotonic() + 60   # teardown runs after the job completed
        while engine.node_gres() != before or engine.joined_machines():
            assert time.monotonic() < deadline, (engine.node_gres(), engine.joined_machines())
            time.sleep(0.1)
        live = [j for j in engine._squeue() if str(j.get("name", "")).startswith(JOB_PREFIX)
                and j.get("job_state") in ("PENDING", "RUNNING")]
        assert live == []
    finally:
        site.run(["scancel", *foreign], check=False)


@pytest.mark.parametrize("fault", ["kill-slurmd", "job-vanishes"])
def test_a_lost_slurm_job_is_requeued_and_its_devices_return(
    fault: str, slurm_cluster: SlurmCluster, slurm_service: Service, drop_dir: Path
) -> None:
    """The slice machine's slurmd dies, or the Slurm job is cancelled behind disagg's back (gone from
    Slurm): either way the slice is torn down, its devices return, and the job runs again."""
    import os
    import signal

    engine = slurm_service.engine
    assert isinstance(engine, SlurmEngine)
    before = engine.node_gres()
    marker = drop_dir / f"attempts-{time.monotonic_ns()}"
    # the first attempt runs long (it gets killed); the second one ends quickly
    command = ["bash", "-c", f'echo "$DISAGG_ATTEMPT" >> {marker}; '
               'if [ "$DISAGG_ATTEMPT" = 1 ]; then sleep 120; fi; echo "done on $SLURMD_NODENAME"']
    headers = {"Authorization": f"Bearer {slurm_service.store.create_token('bob')}"}
    client = TestClient(create_app(slurm_service.jobs))
    r = client.post("/v1/jobs", headers=headers, json={
        "name": "victim", "command": command, "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 1}})
    assert r.status_code == 201, r.text
    jid = r.json()["id"]

    def job() -> dict[str, Any]:
        out: dict[str, Any] = client.get(f"/v1/jobs/{jid}", headers=headers).json()
        return out

    deadline = time.monotonic() + 30
    while not (marker.exists() and job()["state"] == "running"):
        assert time.monotonic() < deadline, job()
        time.sleep(0.1)
    first = job()
    node = f"{first['slice']}-m0"
    first_devices = {d["id"] for t in first["placement"] for d in t["devices"]}
    if fault == "kill-slurmd":
        pid = engine.nodes.slurmd_pid(node)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)                   # the slice machine fails
    else:
        slurm_id = engine.slurm_job_id(first["slice"])
        assert slurm_id is not None
        slurm_cluster.site.run(["scancel", slurm_id])   # someone else's scancel: disagg did not ask

    deadline = time.monotonic() + 60
    while job()["state"] != "completed":
        assert time.monotonic() < deadline, job()
        assert job()["state"] not in ("failed", "cancelled"), job()
        time.sleep(0.2)
    final = job()
    assert final["attempts"] == 2
    assert final["slice"] != first["slice"]
    assert marker.read_text().split() == ["1", "2"]
    with slurm_service.store.read() as s:
        from disagg.store.models import DeviceRow
        held = {d.id for d in s.query(DeviceRow).filter(DeviceRow.slice_id.is_not(None))}
    deadline = time.monotonic() + 60
    while engine.node_gres() != before or held & first_devices:
        assert time.monotonic() < deadline, (engine.node_gres(), held)
        time.sleep(0.2)
        with slurm_service.store.read() as s:
            held = {d.id for d in s.query(DeviceRow).filter(DeviceRow.slice_id.is_not(None))}
    assert node not in engine.node_gres()


def test_reconciliation_makes_orphan_slice_machines_leave(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """A slice machine that no live slice holds (its slice is gone from the store) leaves Slurm at start."""
    from disagg.engines.base import SliceMachine, SliceSpec

    engine = SlurmEngine(slurm_cluster.site)
    before = engine.node_gres()
    orphan = SliceSpec("s-orphan", "j-orphan", ("true",), (SliceMachine("s-orphan-m0", "m1", 1, 1, ("m1/gpu0",)),))
    engine.launch_machine(orphan, orphan.machines[0])
    assert "s-orphan-m0" in engine.node_gres()
    settings = Config(db=f"sqlite:///{tmp_path / 'disagg.db'}",
                        cluster=str(cluster_spec(slurm_cluster, tmp_path / "cluster.yaml")),
                        state_dir=str(tmp_path / "state"), latency_scale=0.002, engine="slurm",
                        slurm_site=str(slurm_cluster.site.save()))
    svc = open_service(settings)
    try:
        assert svc.reconciled.left == ["s-orphan-m0"]
        assert engine.node_gres() == before
        assert engine.joined_machines() == []
    finally:
        svc.close()
