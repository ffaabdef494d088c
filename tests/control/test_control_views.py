"""The store's read views (`disagg.store.views`), on SQLite and on a real PostgreSQL: a tenant sees only
its own jobs and slices, and the views that read a slice's placement read it as `SlicePlacement`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from disagg.control.service import DEFAULT_CLUSTER
from disagg.model import load_cluster
from disagg.model.slices import PlacedDevice, PlacedTask, SlicePlacement
from disagg.store import Principal, Store
from disagg.store.models import DeviceRow, JobRow, SliceRow, StepRow

ALICE, BOB, ADMIN = Principal("alice", False), Principal("bob", False), Principal("ops", True)

#: j-a's slice: one task on node1 with two remote devices, a GPU (2.5 Gbit/s) and an NVMe drive (1.25 Gbit/s).
PLACEMENT = SlicePlacement("s-a", (
    PlacedTask("j-a/0", "node1", 2.0, 4.0, (
        PlacedDevice("iobox0/gpu0", "gpu", True, "iobox0", ("up:node1", "up:iobox0"), 2.5),
        PlacedDevice("iobox1/nvme0", "nvme", True, "iobox1", ("up:node1", "up:iobox1"), 1.25),
    )),
))


def _job(job_id: str, tenant: str, seq: int, state: str, slice_id: str | None) -> JobRow:
    return JobRow(id=job_id, seq=seq, tenant=tenant, name="n", image="i", command=["true"], tasks={"count": 1},
                  slo_s=None, importance=1.0, max_retries=2, state=state, reason=None, reason_code=None,
                  wait_rounds=0, attempts=1, exit_code=None, slice_id=slice_id, submitted_at=0.0, updated_at=0.0,
                  idempotency_key=None, request_hash=None)


def _slice(slice_id: str, job_id: str, state: str, placement: SlicePlacement, at: float) -> SliceRow:
    return SliceRow(id=slice_id, job_id=job_id, attempt=1, state=state, outcome=None, detail=None,
                    placement=placement.to_json(), handle=None, created_at=at, updated_at=at)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """The default testbed with alice's running job j-a (slice s-a) and bob's finished j-b (slice s-b)."""
    st = Store(db_url)
    st.migrate()
    st.sync_inventory(load_cluster(DEFAULT_CLUSTER))
    with st.write() as s:
        s.add_all([_job("j-a", "alice", 2, "running", "s-a"), _job("j-b", "bob", 1, "completed", "s-b")])
        s.flush()
        s.add_all([_slice("s-a", "j-a", "running", PLACEMENT, 2.0),
                   _slice("s-b", "j-b", "done", SlicePlacement("s-b", (PlacedTask("j-b/0", "node3", 1.0, 1.0),)), 1.0)])
        s.flush()
        s.add(StepRow(slice_id="s-a", op="attach-device", target="iobox0/gpu0", status="done", tries=1,
                      started_at=1.0, ended_at=1.5, error=None))
        for dev_id in ("iobox0/gpu0", "iobox1/nvme0"):
            dev = s.get(DeviceRow, dev_id)
            assert dev is not None
            dev.slice_id = "s-a"
    yield st
    st.close()


def test_a_tenant_sees_only_its_own_jobs_and_slices(store: Store) -> None:
    assert [j["id"] for j in store.jobs_list(ALICE)] == ["j-a"]
    assert [j["id"] for j in store.jobs_list(ADMIN)] == ["j-a", "j-b"]  # newest first
    assert [j["id"] for j in store.jobs_list(ADMIN, state="completed")] == ["j-b"]
    assert [j["id"] for j in store.jobs_list(ADMIN, limit=1)] == ["j-a"]
    assert store.job_view("j-a", BOB) is None and not store.job_visible("j-a", BOB)
    assert store.job_view("j-nope", ADMIN) is None
    assert store.job_visible("j-a", ALICE) and store.job_visible("j-b", ADMIN)
    assert [sl["id"] for sl in store.slices_list(BOB)] == ["s-b"]
    assert [sl["id"] for sl in store.slices_list(ADMIN)] == ["s-a", "s-b"]
    assert [sl["id"] for sl in store.slices_list(ADMIN, state="done")] == ["s-b"]
    (mine,) = store.slices_list(ALICE, steps=True)
    assert [(st["op"], st["target"], st["status"]) for st in mine["steps"]] == [
        ("attach-device", "iobox0/gpu0", "done")]
    assert "steps" not in store.slices_list(ALICE)[0]
    assert [sl["id"] for sl in store.live_slices_view()] == ["s-a"]


def test_the_views_read_a_slice_placement_as_the_typed_value(store: Store) -> None:
    job = store.job_view("j-a", ALICE)
    assert job is not None and job["placement"] == [t.to_json() for t in PLACEMENT.tasks]
    bobs = store.job_view("j-b", BOB)
    assert bobs is not None and bobs["placement"] == [
        {"task": "j-b/0", "machine": "node3", "cpus": 1.0, "memory_gb": 1.0, "devices": []}]
    links = {lk["id"]: lk for lk in store.links_view()}
    assert (links["up:node1"]["load_gbps"], links["up:node1"]["slices"]) == (3.75, ["s-a"])
    assert (links["up:iobox0"]["load_gbps"], links["up:iobox0"]["utilisation"]) == (2.5, 0.0625)
    assert links["up:node3"]["slices"] == []  # s-b is done: it holds nothing
    machines = {m["id"]: m for m in store.machines_view()}
    assert (machines["node1"]["state"], machines["node1"]["slices"]) == ("attached", ["s-a"])
    assert machines["node3"]["state"] == "free" and machines["iobox1"]["devices"][0] == "iobox1/nvme0"
    devices = {d["id"]: d for d in store.devices_view()}
    assert devices["iobox0/gpu0"]["state"] == "attached" and devices["iobox0/gpu0"]["slice"] == "s-a"


def test_the_dashboard_reads(store: Store) -> None:
    with store.write() as s:
        for dev_id, health, drained in (("iobox0/gpu3", "failed", False), ("iobox0/gpu1", "healthy", True)):
            dev = s.get(DeviceRow, dev_id)
            assert dev is not None
            dev.health, dev.drained = health, drained
    assert [d["id"] for d in store.attention_devices(10)] == ["iobox0/gpu1", "iobox0/gpu3"]
    assert [d["state"] for d in store.attention_devices(1)] == ["drained"]
    assert store.machine_racks(["node1", "iobox0", "nowhere"]) == {"node1": "r0", "iobox0": "r0"}
    assert store.node_counts() == {("r0", "machine"): 4, ("r0", "pool"): 2}
    counts = store.counts()
    assert counts["jobs"] == {"running": 1, "completed": 1} and counts["slices"] == {"running": 1, "done": 1}
    assert counts["devices"] == {"free": 5, "attached": 2, "failed": 1, "drained": 1}
    assert store.device_counts("kind")[("attached", "gpu")] == 1
