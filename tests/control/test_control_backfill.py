"""Backfill past the window (issue 14): the loop considers every queued job each round — the oldest
`window` as before, plus one per distinct request among the rest — without taking what the head waits for."""

from __future__ import annotations

from pathlib import Path

from control_helpers import job, make_service, submit

from disagg.model.states import JobState
from disagg.store import Store
from disagg.store.jobs import new_job_row


def _queue(store: Store, requests: list[dict[str, float]]) -> list[str]:
    """Queued jobs with these task requests, in this order (their `seq`)."""
    ids = []
    with store.write_core() as conn:
        from disagg.store.lifecycle import new_jobs
        rows = []
        for i, tasks in enumerate(requests):
            row = new_job_row("t", {"name": f"j{i}", "image": "rodinia/nw", "command": ["true"],
                                    "tasks": {"count": 1, "memory_gb": 1.0, **tasks}}, None, None, 0.0)
            row["seq"] = i + 1
            rows.append(row)
            ids.append(row["id"])
        new_jobs(conn, rows)
    return ids


def test_representatives_are_the_oldest_per_distinct_request_beyond_the_window(db_url: str) -> None:
    store = Store(db_url)
    store.migrate()
    gpu, cpu, two = {"cpus": 1.0, "gpu": 4}, {"cpus": 1.0}, {"cpus": 2.0}
    ids = _queue(store, [gpu, gpu, gpu, cpu, gpu, cpu, two, gpu])
    # window 2 holds j0, j1: after it, the first of each request: j2 (gpu), j3 (cpu), j6 (two)
    assert [j.name for j in store.queued_representatives(2, 10)] == [ids[2], ids[3], ids[6]]
    assert [j.name for j in store.queued_representatives(2, 2)] == [ids[2], ids[3]]
    assert [j.name for j in store.queued_representatives(3, 10)] == [ids[3], ids[4], ids[6]]
    assert store.queued_representatives(8, 10) == [] and store.queued_representatives(2, 0) == []
    reps = store.queued_representatives(2, 10)
    assert reps[1].tasks.cpus == 1.0 and not reps[1].tasks.devices  # as the policies see them
    store.close()


def test_a_small_job_behind_a_wall_of_gpu_jobs_starts_in_the_first_round(tmp_path: Path) -> None:
    # The FlowOS-RM testbed: 4 nodes of 10 cpus, 5 GPUs in an I/O box. One tenant fills the queue with
    # 4-GPU jobs; another submits a 1-cpu job last. The window holds 2 jobs.
    svc = make_service(tmp_path, window=2)
    try:
        wall = [submit(svc, "gpu", gpu=4, command=["sleep", "30"]) for _ in range(6)]
        small = submit(svc, "cpu", gpu=0, cpus=1.0, command=["sleep", "30"])
        decisions = svc.controller.schedule()
        assert decisions is not None
        assert job(svc, wall[0])["state"] == JobState.COMPOSING   # the window's first
        assert job(svc, small)["state"] == JobState.COMPOSING     # backfilled
        assert all(job(svc, j)["state"] == JobState.QUEUED for j in wall[1:])
        assert decisions.stats["backfilled"] == 1
        assert svc.controller.last_round["backfilled"] == 1
        # wall[1] is the head: its reservation (the GPUs it would take were wall[0] gone) is held, and
        # wall[2] (a backfill candidate with the same request) says so
        why = job(svc, wall[2])["reason"]
        assert f"the resources reserved for {wall[1]} were held" in why
    finally:
        svc.close()


def test_without_backfill_the_small_job_waits_beyond_the_window(tmp_path: Path) -> None:
    svc = make_service(tmp_path, window=2, backfill=0)
    try:
        [submit(svc, "gpu", gpu=4, command=["sleep", "30"]) for _ in range(6)]
        small = submit(svc, "cpu", gpu=0, cpus=1.0)
        svc.controller.schedule()
        assert job(svc, small)["state"] == JobState.QUEUED
    finally:
        svc.close()
