"""Issue 22, high 2: Redfish compositions inside the scheduler's accounting. A tenant with a 1-GPU, 4-cpu
quota composed a whole 10-cpu machine, then 4 GPUs and 4 NVMe (`CoreCount 0.001`); `/v1/tenants` showed her
usage as `{}`, and another tenant under her quota waited with nothing preempted. Each test attacks a real
controller (store, loop, engine; the API in process) and failed before the fix."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_helpers import body, make_service, wait_for
from fastapi.testclient import TestClient
from tests.attacks import COHORT

from disagg.api import create_app
from disagg.control.service import Service

SYSTEMS = "/redfish/v1/Systems"
BLOCKS = "/redfish/v1/CompositionService/ResourceBlocks"
GPUS = [f"iobox0:gpu{i}" for i in range(5)]
NVMES = [f"iobox1:nvme{i}" for i in range(4)]


def _served(tmp_path: Path, **config: Any) -> Iterator[tuple[Service, TestClient, dict[str, dict[str, str]]]]:
    svc = make_service(tmp_path, **config)
    svc.controller.start()
    try:
        with TestClient(create_app(svc.jobs)) as client:
            h = {t: {"Authorization": f"Bearer {svc.store.create_token(t, admin=t == 'ops')}"}
                 for t in ("alice", "bob", "ops")}
            yield svc, client, h
    finally:
        svc.close()


def _compose(client: TestClient, h: dict[str, str], host: str, *devices: str, **sizes: Any) -> Any:
    extra = {}
    if "cores" in sizes:
        extra["ProcessorSummary"] = {"CoreCount": sizes["cores"]}
    return client.post(SYSTEMS, headers=h, json={
        "Name": "mine", "Links": {"ResourceBlocks": [{"@odata.id": f"{BLOCKS}/{b}"} for b in (host, *devices)]},
        **extra})


def _composed(client: TestClient, h: dict[str, str], r: Any) -> None:
    assert r.status_code == 202, r.text
    wait_for(lambda: client.get(r.headers["Location"], headers=h).status_code == 201, 30, "the composition")


def _usage(client: TestClient, h: dict[str, str], tenant: str) -> dict[str, float]:
    return dict(client.get(f"/v1/tenants/{tenant}", headers=h).json()["usage"])


@pytest.fixture
def quota(tmp_path: Path) -> Iterator[tuple[Service, TestClient, dict[str, dict[str, str]]]]:
    yield from _served(tmp_path, tenants=[{"name": "alice", "quota": {"gpu": 1, "cpus": 4}}, {"name": "bob"}],
                       max_compositions_per_tenant=2)


def test_a_composition_is_held_by_its_tenant_within_its_quota(quota) -> None:
    svc, client, h = quota
    alice = h["alice"]
    whole = _compose(client, alice, "node0")  # the whole machine: 10 cpus, past her 4
    assert whole.status_code == 409, whole.text
    assert "ResourceExhaustion" in whole.text and "quota 4" in whole.json()["error"]["message"]
    tiny = _compose(client, alice, "node0", *GPUS[:4], *NVMES, cores=0.001)  # the trick
    assert tiny.status_code == 400 and "CoreCount" in tiny.text
    _composed(client, alice, _compose(client, alice, "node0", GPUS[0], cores=2))
    assert _usage(client, alice, "alice") == pytest.approx({"cpus": 2.0, "memory_gb": 25.6, "gpu": 1.0,
                                                            "network_gbps": 1.0})
    more = _compose(client, alice, "node1", GPUS[1], cores=1)  # a second GPU: past her quota of 1
    assert more.status_code == 409 and "gpu" in more.json()["error"]["message"]
    system = client.get(SYSTEMS, headers=alice).json()["Members"][0]["@odata.id"]
    add = client.post(f"{system}/Actions/ComputerSystem.AddResourceBlock", headers=alice,
                      json={"ResourceBlock": {"@odata.id": f"{BLOCKS}/{GPUS[1]}"}})
    assert add.status_code == 409 and "ResourceExhaustion" in add.text  # nor by adding a block
    # the fair share sees her composition: her decayed usage grows while she holds it (rounds, which queued
    # jobs bring, decay the usage)
    def counted() -> bool:
        svc.jobs.submit("bob", body("tick", ["true"], gpu=0, cpus=0.5))
        time.sleep(0.2)
        return svc.controller.tenancy.history.get("alice", {}).get("gpu", 0.0) > 0

    wait_for(counted, 20, "alice's decayed usage to count her composition")


def test_a_tenant_holds_at_most_its_cap_of_compositions(quota) -> None:
    _, client, h = quota
    bob = h["bob"]  # no quota: only the cap stops him
    for host in ("node0", "node1"):
        _composed(client, bob, _compose(client, bob, host, cores=1))
    third = _compose(client, bob, "node2", cores=1)
    assert third.status_code == 409 and "max_compositions_per_tenant" in third.text


@pytest.fixture
def bandwidth(tmp_path: Path) -> Iterator[tuple[Service, TestClient, dict[str, dict[str, str]]]]:
    yield from _served(tmp_path, composition_device_gbps=15.0)


@pytest.fixture
def cohort(tmp_path: Path) -> Iterator[tuple[Service, TestClient, dict[str, dict[str, str]]]]:
    yield from _served(tmp_path, tenants=COHORT, preempt_grace_s=1.0)


def test_a_composition_reserves_its_remote_devices_bandwidth(bandwidth) -> None:
    _, client, h = bandwidth
    _composed(client, h["bob"], _compose(client, h["bob"], "node0", GPUS[0], GPUS[1], cores=1))
    links = {lk["id"]: lk for lk in client.get("/v1/links", headers=h["ops"]).json()["links"]}
    assert links["up:node0"]["load_gbps"] == pytest.approx(30.0)
    over = _compose(client, h["alice"], "node1", GPUS[2], GPUS[3], GPUS[4], cores=1)  # 45 on iobox0's 40
    assert over.status_code == 409 and "up:iobox0" in over.json()["error"]["message"]


def test_a_borrowing_composition_is_preempted_for_a_lender(cohort) -> None:
    """Alice (quota 2 + borrow 3) composes 2 GPUs, then the other 3 (borrowed); bob, within his quota of 3,
    asks for one: after the grace period the borrowing composition is decomposed and bob's job runs. As for
    jobs, a composition is a victim when its tenant stays at or above its quota without it."""
    svc, client, h = cohort
    _composed(client, h["alice"], _compose(client, h["alice"], "node0", *GPUS[:2], cores=1))
    borrowing = _compose(client, h["alice"], "node1", *GPUS[2:], cores=1)
    _composed(client, h["alice"], borrowing)
    assert _usage(client, h["alice"], "alice")["gpu"] == 5.0
    j, _ = svc.jobs.submit("bob", body("claim", ["sleep", "30"], gpu=1, cpus=1.0))
    wait_for(lambda: client.get(f"/v1/jobs/{j['id']}", headers=h["bob"]).json()["state"] == "running", 60,
             "bob's job to run on a GPU alice's composition gave back")
    kept = [s for s in svc.store.redfish_inventory().slices if s.job_id is None]
    assert [s.placement.tasks[0].machine for s in kept] == ["node0"]  # the one within her quota stays
    gone = svc.store.any_slice(borrowing.json()["Id"])
    assert gone is not None and "preempted by " + j["id"] in (gone.detail or ""), gone
