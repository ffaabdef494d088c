"""No job waits forever in the live controller (issue 21): the placement / loop / quota side.

Each test is one of the issue's reproductions, on the default cluster (node0–3 without devices,
iobox0 with four P100 and one P40, iobox1 with four NVMe), driven round by round with
`Controller.schedule()` and no loop thread: slices stay `composing`, holding what they got, so a
round sees exactly what the test set up.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_helpers import body, job, make_service

from disagg.control.service import Service
from disagg.model.states import JobState


def _submit(svc: Service, tenant: str, name: str, **tasks: Any) -> str:
    j, created = svc.jobs.submit(tenant, body(name, ["true"], **tasks))
    assert created
    return str(j["id"])


def _rounds(svc: Service, n: int) -> None:
    for _ in range(n):
        svc.controller.schedule()


@pytest.fixture
def carol_and_dave(tmp_path: Path) -> Iterator[Service]:
    """carol may hold 1 GPU (no cohort: she cannot borrow); dave has no limits. A head starves after 2 rounds."""
    svc = make_service(tmp_path, tenants=[{"name": "carol", "quota": {"gpu": 1}}], starvation_rounds=2)
    yield svc
    svc.close()


def test_a_job_waiting_for_its_own_quota_reserves_nothing(carol_and_dave: Service) -> None:
    """Reproduction 2: carol's C2, pinned to the P40 and held back by her own quota, starves past the
    bound; dave's younger 1-GPU job must still get the free P40 (it used to be reserved for C2)."""
    svc = carol_and_dave
    c1 = _submit(svc, "carol", "c1", gpu_model="P100")
    _rounds(svc, 1)
    dave = [_submit(svc, "dave", f"d{i}", gpu_model="P100") for i in range(3)]
    _rounds(svc, 1)
    assert all(job(svc, j)["state"] == JobState.COMPOSING for j in [c1, *dave]), "the four P100s are held"
    c2 = _submit(svc, "carol", "c2", gpu_model="P40")
    _rounds(svc, 4)
    waiting = job(svc, c2)
    assert waiting["state"] == JobState.QUEUED and "waits for its own quota" in (waiting["reason"] or "")
    assert waiting["wait_rounds"] >= 2, "C2 has starved past the bound"
    d4 = _submit(svc, "dave", "d4")
    _rounds(svc, 1)
    assert job(svc, d4)["state"] == JobState.COMPOSING, job(svc, d4)["reason"]
    assert job(svc, c2)["state"] == JobState.QUEUED
