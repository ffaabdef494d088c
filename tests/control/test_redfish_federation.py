"""Federation, end to end: disagg A serves Redfish over its emulated fabric; disagg B, with
`fabric: {driver: redfish, url: <A>}` and a cluster spec from discovering A, composes its slices on A.

Each test runs both ways A can be configured: `at-once` (`redfish_updatable: false`: B's attach steps only
collect the blocks and its launch-machine composes the system with all of them in one POST) and
`one-by-one` (A's composed systems take AddResourceBlock / RemoveResourceBlock: B composes the system with
its Compute block at the first attach, each attach adds its device's block and each detach removes it)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from control_helpers import admin_token
from redfish_helpers import start_a, start_b, systems, wait
from sqlalchemy import select
from tests.attacks import drop_dir

from disagg.store import Store
from disagg.store.models import EventRow

BLOCKS = "/redfish/v1/CompositionService/ResourceBlocks"


def submit(url: str, token: str, gpus: int, command: str, name: str = "fed") -> str:
    body = {"name": name, "image": "rodinia/nw", "command": ["sh", "-c", command], "max_retries": 3,
            "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": gpus}}
    r = httpx.post(f"{url}/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code in (200, 201, 202), r.text
    return str(r.json()["id"])


def job(url: str, token: str, job_id: str) -> dict:
    return httpx.get(f"{url}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {token}"}).json()


def ours(a_url: str, a_admin: str, marker: str = "disagg-b") -> list[dict]:
    return [s for s in systems(a_url, a_admin) if s["Name"].startswith(marker + ":")]


@pytest.fixture
def runs() -> Iterator[Path]:
    """A file every tenant's user may append to (as root, B's jobs run as its tenant's user, who cannot
    reach pytest's own directories): each run of the job writes a line."""
    with drop_dir("disagg-fed-") as d:
        out = d / "runs"
        out.touch()
        out.chmod(0o666)
        yield out


@pytest.fixture(params=["at-once", "one-by-one"])
def federation(tmp_path: Path, request: pytest.FixtureRequest):
    updatable = request.param == "one-by-one"
    a, tokens = start_a(tmp_path / "a", updatable=updatable)
    b = start_b(tmp_path / "b", a.url, "alice", tokens["alice"])
    yield a, b, tokens, tmp_path, updatable
    for s in (b, a):
        if s.pid:
            s.kill()


def a_compositions(root: Path) -> dict[str, list[tuple[str | None, str, str | None]]]:
    """A's compositions (slices with no job) and each one's moves (from, to, why), read from A's store."""
    store = Store(f"sqlite:///{root / 'a' / 'a.db'}")
    try:
        ids = [r.id for r in store.all_slices() if r.job_id is None]
        with store.read() as s:
            rows = s.execute(select(EventRow).where(EventRow.slice_id.in_(ids)).order_by(EventRow.id)).scalars()
            out: dict[str, list[tuple[str | None, str, str | None]]] = {i: [] for i in ids}
            for r in rows:
                out[str(r.slice_id)].append((r.from_state, r.to_state, r.why))
        return out
    finally:
        store.close()


def a_live(root: Path) -> list[str]:
    """A's live slices."""
    store = Store(f"sqlite:///{root / 'a' / 'a.db'}")
    try:
        return [r.id for r in store.live_slices()]
    finally:
        store.close()


def a_holds_nothing(root: Path) -> None:
    """A's store: no device held, no composition live."""
    store = Store(f"sqlite:///{root / 'a' / 'a.db'}")
    try:
        assert store.held_devices() == {}
    finally:
        store.close()
    assert a_live(root) == []


def test_b_runs_a_2_gpu_job_composed_on_a_and_leaves_nothing(federation, runs: Path) -> None:
    a, b, tokens, root, updatable = federation
    b_admin = admin_token(root / "b")
    j = submit(b.url, b_admin, 2, f"sleep 1.5; echo ran >> {runs}")
    seen = []  # the block counts of B's system on A, as A's Redfish service showed them while B composed
    while job(b.url, b_admin, j)["state"] in ("queued", "composing"):
        seen += [len(x["Links"]["ResourceBlocks"]) for x in ours(a.url, tokens["admin"])]
        time.sleep(0.01)
    assert job(b.url, b_admin, j)["state"] == "running"
    composed = ours(a.url, tokens["admin"])
    assert len(composed) == 1
    blocks = [x["@odata.id"] for x in composed[0]["Links"]["ResourceBlocks"]]
    placement = job(b.url, b_admin, j)["placement"]
    devices = [d["id"] for t in placement for d in t["devices"]]
    assert len(devices) == 2
    assert sorted(blocks) == sorted([f"{BLOCKS}/{placement[0]['machine']}"] +
                                    [f"{BLOCKS}/{d.replace('/', ':')}" for d in devices])
    assert composed[0]["SystemType"] == "Composed"
    assert seen == sorted(seen) and set(seen) <= {1, 2, 3}
    if not updatable:
        assert set(seen) <= {3}  # composed at once: never a system with fewer blocks
    wait(lambda: job(b.url, b_admin, j)["state"] == "completed", what="the job to complete")
    wait(lambda: not ours(a.url, tokens["admin"]), what="B's composition to be decomposed")
    assert runs.read_text().count("ran") == 1
    # A's store: the composition came and went through its slice state machine, nothing holds a device
    a_holds_nothing(root)
    (moves,) = a_compositions(root).values()
    states = [(src, dst) for src, dst, _ in moves]
    whys = [why for src, dst, why in moves if (src, dst) == ("composed", "composing")]
    if updatable:  # the Compute block, then each device added, then each removed: one update at a time
        assert states == [(None, "composing"), ("composing", "composed")] + [
            ("composed", "composing"), ("composing", "composed")] * 4 + [
            ("composed", "tearing-down"), ("tearing-down", "done")]
        assert sorted(whys[:2]) == sorted(f"adding {d}" for d in devices)
        assert sorted(whys[2:]) == sorted(f"removing {d}" for d in devices)
    else:
        assert states == [(None, "composing"), ("composing", "composed"), ("composed", "tearing-down"),
                          ("tearing-down", "done")]


def test_kill_9_of_b_while_composing_leaks_nothing_on_a_and_runs_the_job_once(federation, runs: Path) -> None:
    a, b, tokens, root, updatable = federation
    b_admin = admin_token(root / "b")
    j = submit(b.url, b_admin, 2, f"echo ran >> {runs}; sleep 0.5")
    if updatable:  # killed during an update: B's system on A has some of its blocks, not all
        wait(lambda: [x for x in ours(a.url, tokens["admin"]) if len(x["Links"]["ResourceBlocks"]) < 3],
             timeout=20, what="B's system on A, partly composed")
    else:
        wait(lambda: job(b.url, b_admin, j)["state"] == "composing", timeout=20, what="B to compose")
    b.kill()
    time.sleep(0.3)
    b.start()
    b.ready()
    wait(lambda: job(b.url, b_admin, j)["state"] == "completed", timeout=60, what="the job after the restart")
    wait(lambda: not ours(a.url, tokens["admin"]), what="no composition of B left on A")
    assert runs.read_text().count("ran") == 1
    wait(lambda: not a_live(root), what="A's compositions to end")
    a_holds_nothing(root)


def test_a_block_taken_on_a_meanwhile_makes_b_plan_around_it(federation) -> None:
    a, b, tokens, root, _ = federation
    b_admin = admin_token(root / "b")
    # bob takes the four P100s on A directly, after B discovered them free
    h = {"Authorization": f"Bearer {tokens['bob']}"}
    body = {"Name": "bob's", "Links": {"ResourceBlocks": [{"@odata.id": f"{BLOCKS}/node3"}] + [
        {"@odata.id": f"{BLOCKS}/iobox0:gpu{i}"} for i in range(4)]}}
    r = httpx.post(f"{a.url}/redfish/v1/Systems", json=body, headers=h)
    assert r.status_code == 202, r.text
    j = submit(b.url, b_admin, 1, "true")
    done = wait(lambda: (x := job(b.url, b_admin, j))["state"] == "completed" and x, timeout=60,
                what="B's job on the free GPU")
    assert [d["id"] for t in done["placement"] for d in t["devices"]] == ["iobox0/gpu4"]
    assert done["placement"][0]["machine"] != "node3"  # bob's system holds node3 whole
