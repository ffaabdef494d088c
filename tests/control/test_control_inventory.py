"""A start with an edited cluster spec (docs/controller.md, "Changing the cluster"): taking things out of
the inventory needs the operator's word; the queued jobs the cluster can no longer ever hold are held in
the words a submission of them is refused with, and only those, and released by a start whose spec can
hold them again (the inventory's own changes are tested in test_control_store.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from disagg.control.service import DEFAULT_CLUSTER, _follow_spec
from disagg.model import SpecError, load_cluster
from disagg.model.states import JobReason, JobState
from disagg.store import Store, new_job_row
from disagg.store.lifecycle import new_jobs


def _queue(store: Store, name: str, gpus: int, model: str | None) -> str:
    tasks = {"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": gpus, "gpu_model": model}
    row = new_job_row("acme", {"name": name, "image": "i", "command": ["true"], "tasks": tasks}, None, None, 0.0)
    with store.write_core() as conn:
        new_jobs(conn, [row])
    return str(row["id"])


def _spec(tmp_path: Path, p100: int) -> Path:
    spec = tmp_path / f"p100-{p100}.yaml"
    spec.write_text(DEFAULT_CLUSTER.read_text().replace("{model: P100, count: 4}", f"{{model: P100, count: {p100}}}"))
    return spec


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_queued_jobs_the_edited_cluster_can_never_hold_are_held_and_given_back(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = (f"sqlite:///{tmp_path / 'd.db'}" if kind == "sqlite"
           else request.getfixturevalue("pg_server").create_database("inv_" + tmp_path.name[-12:].lower()))
    store = Store(url)
    store.migrate()
    _follow_spec(store, load_cluster(DEFAULT_CLUSTER), accept_removals=False)
    four = _queue(store, "four", 4, "P100")
    three_any = _queue(store, "three-any", 3, None)  # 2 P100 and the P40 still make 3
    one = _queue(store, "one", 1, "P100")
    _follow_spec(store, load_cluster(_spec(tmp_path, 4)), accept_removals=False)  # nothing changed
    assert {s.id: s.state for s in store.job_summaries()} == dict.fromkeys((four, three_any, one), JobState.QUEUED)
    before = store.cluster()
    with pytest.raises(SpecError, match=r"it takes 2 devices \(iobox0/gpu3, iobox0/gpu4\) out of the inventory: "
                                        r"a spec of another cluster, or a start without its --cluster\? Start with "
                                        r"--accept-inventory-removals"):
        _follow_spec(store, load_cluster(_spec(tmp_path, 2)), accept_removals=False)
    assert store.cluster().devices == before.devices
    assert {s.id: s.state for s in store.job_summaries()}[four] == JobState.QUEUED
    _follow_spec(store, load_cluster(_spec(tmp_path, 2)), accept_removals=True)
    states = {s.id: s for s in store.job_summaries()}
    assert states[four].state == JobState.HELD
    assert states[four].reason == ("held: the job can never fit on this cluster as its spec now is: needs 4 gpu of "
                                   "model P100 in all; the cluster has 2 (released when a start's spec can hold "
                                   "it; disagg cancel ends it)")
    assert states[three_any].state == states[one].state == JobState.QUEUED
    with store.read_core() as conn:
        code = conn.exec_driver_sql(f"SELECT reason_code FROM jobs WHERE id = '{four}'").scalar_one()
    assert code == JobReason.NEVER_FITS
    _follow_spec(store, load_cluster(_spec(tmp_path, 4)), accept_removals=False)  # the GPUs back: so is the job
    assert {s.id: s.state for s in store.job_summaries()}[four] == JobState.QUEUED
    store.close()


def test_a_submission_is_checked_against_the_inventory_as_it_now_is(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The API checked submissions against the cluster it read at its own start: after another replica's
    start with a spec of more GPUs, a job for them was refused ("can never fit") until this API restarted."""
    from control_helpers import make_service

    import disagg.control.jobs as jobs_module
    from disagg.control.jobs import JobRejected

    monkeypatch.setattr(jobs_module, "INVENTORY_RECHECK_S", 0.0)
    svc = make_service(tmp_path, cluster=str(_spec(tmp_path, 4)))
    try:
        body = {"name": "six", "image": "i", "command": ["true"],
                "tasks": {"count": 1, "cpus": 1, "memory_gb": 1, "gpu": 6, "gpu_model": "P100"}}
        with pytest.raises(JobRejected, match="needs 6 gpu of model P100 in all; the cluster has 4"):
            svc.jobs.submit("acme", body)
        other = Store(svc.config.db)  # another replica's start, with two more P100s
        _follow_spec(other, load_cluster(_spec(tmp_path, 6)), accept_removals=False)
        other.close()
        created, _ = svc.jobs.submit("acme", body)
        assert created["state"] == JobState.QUEUED
    finally:
        svc.close()
