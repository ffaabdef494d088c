"""Federation, end to end: disagg A serves Redfish over its emulated fabric; disagg B, with
`fabric: {driver: redfish, url: <A>}` and a cluster spec from discovering A, composes its slices on A."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from control_helpers import admin_token
from redfish_helpers import start_a, start_b, systems, wait

from disagg.store import Store

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
    root = Path(tempfile.mkdtemp(prefix="disagg-fed-"))
    root.chmod(0o755)
    out = root / "runs"
    out.touch()
    out.chmod(0o666)
    yield out
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def federation(tmp_path: Path):
    a, tokens = start_a(tmp_path / "a")
    b = start_b(tmp_path / "b", a.url, "alice", tokens["alice"])
    yield a, b, tokens, tmp_path
    for s in (b, a):
        if s.pid:
            s.kill()


def test_b_runs_a_2_gpu_job_composed_on_a_and_leaves_nothing(federation, runs: Path) -> None:
    a, b, tokens, root = federation
    b_admin = admin_token(root / "b")
    j = submit(b.url, b_admin, 2, f"sleep 1.5; echo ran >> {runs}")
    composed = wait(lambda: ours(a.url, tokens["admin"]), what="B's composed system on A")
    assert len(composed) == 1
    blocks = [x["@odata.id"] for x in composed[0]["Links"]["ResourceBlocks"]]
    placement = wait(lambda: job(b.url, b_admin, j).get("placement"), what="B's placement")
    devices = [d["id"] for t in placement for d in t["devices"]]
    assert len(devices) == 2
    assert sorted(blocks) == sorted([f"{BLOCKS}/{placement[0]['machine']}"] +
                                    [f"{BLOCKS}/{d.replace('/', ':')}" for d in devices])
    assert composed[0]["SystemType"] == "Composed"
    wait(lambda: job(b.url, b_admin, j)["state"] == "completed", what="the job to complete")
    wait(lambda: not ours(a.url, tokens["admin"]), what="B's composition to be decomposed")
    assert runs.read_text().count("ran") == 1
    # A's store: the composition came and went through its slice state machine, nothing holds a device
    store = Store(f"sqlite:///{root / 'a' / 'a.db'}")
    assert store.held_devices() == {}
    store.close()


def test_kill_9_of_b_while_composing_leaks_nothing_on_a_and_runs_the_job_once(federation, runs: Path) -> None:
    a, b, tokens, root = federation
    b_admin = admin_token(root / "b")
    j = submit(b.url, b_admin, 2, f"echo ran >> {runs}; sleep 0.5")
    wait(lambda: job(b.url, b_admin, j)["state"] == "composing", timeout=20, what="B to compose")
    b.kill()
    time.sleep(0.3)
    b.start()
    b.ready()
    wait(lambda: job(b.url, b_admin, j)["state"] == "completed", timeout=60, what="the job after the restart")
    wait(lambda: not ours(a.url, tokens["admin"]), what="no composition of B left on A")
    assert runs.read_text().count("ran") == 1


def test_a_block_taken_on_a_meanwhile_makes_b_plan_around_it(federation) -> None:
    a, b, tokens, root = federation
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
