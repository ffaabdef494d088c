"""kill -9 of the controller at random moments while slices compose and tasks run.

A real `disagg serve` runs as a child process (forked from the test, which has imported everything)
on SQLite with the emulated testbed 100x faster; it is
killed with SIGKILL at a random moment (during start-up and reconciliation too), restarted, killed
again, ... for TRIALS trials. Every job's command logs when each task starts and ends. After each
kill the world is reconciled (every other trial by the restarted server itself, every other one by
the same reconciliation in-process) and checked:
  - no device stays attached (on the fabric or in the store) without a live slice that holds it;
  - no slice is lost (every slice ever seen is still in the store);
  - every composing/running job has exactly one live slice; queued jobs have none;
  - no job has two live runners on the engine, and no runner lives without a live slice.
At the end the server runs undisturbed: every job ends completed, and the task logs show that no
job ever ran twice at the same time.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from control_helpers import Server
from sqlalchemy import select

from disagg.control.service import Service, Settings, open_service
from disagg.store import LIVE_SLICE_STATES, Store
from disagg.store.models import DeviceRow, JobRow, SliceRow

TRIALS = int(os.environ.get("DISAGG_CRASH_TRIALS", "50"))
SCALE = 0.01  # attach 40 ms, launch-machine 300 ms, destroy-machine 100 ms


def job_body(rng: random.Random, events: Path, i: int) -> dict[str, Any]:
    cmd = (f"echo start $DISAGG_JOB $DISAGG_SLICE $DISAGG_TASK_INDEX $(date +%s.%N) >> {events}; "
           f"sleep {rng.choice([0.05, 0.2, 0.5])}; "
           f"echo end $DISAGG_JOB $DISAGG_SLICE $DISAGG_TASK_INDEX $(date +%s.%N) >> {events}")
    return {"name": f"crash-{i}", "image": "rodinia/nw", "command": ["sh", "-c", cmd], "max_retries": 10,
            "tasks": {"count": rng.choice([1, 1, 2]), "cpus": 1.0, "memory_gb": 1.0, "gpu": rng.choice([0, 1, 1, 2])}}


def check(svc: Service, seen_slices: set[str], final: bool = False) -> None:
    """The invariants on a reconciled, quiescent world."""
    with svc.store.read() as s:
        slices = {r.id: r for r in s.scalars(select(SliceRow))}
        jobs = {r.id: r for r in s.scalars(select(JobRow))}
        devices = list(s.scalars(select(DeviceRow)))
    live = {sid: r for sid, r in slices.items() if r.state in LIVE_SLICE_STATES}
    assert seen_slices <= set(slices), f"slices lost: {seen_slices - set(slices)}"
    seen_slices |= set(slices)
    holds = {(d, m["host"]) for r in live.values() for m in r.placement["machines"] for d in m["devices"]}
    for a in svc.fabric.attachments():
        assert (a.device, a.machine) in holds, f"{a.device} attached to {a.machine} without a slice"
    for d in devices:
        assert d.slice_id is None or d.slice_id in live, f"{d.id} held by gone slice {d.slice_id}"
    per_job: dict[str, list[str]] = defaultdict(list)
    for sid, r in live.items():
        per_job[r.job_id].append(sid)
    for jid, sids in per_job.items():
        assert len(sids) == 1, f"job {jid} has {len(sids)} live slices"
    for jid, j in jobs.items():
        if j.state in ("composing", "running"):
            assert j.slice_id in live and live[j.slice_id].job_id == jid, f"job {jid} {j.state} without its slice"
        if j.state == "queued":
            assert jid not in per_job, f"queued job {jid} still has a live slice"
    running: dict[str, int] = defaultdict(int)
    for h in svc.engine.handles():
        if svc.engine.status(h).state == "running":
            assert h in live, f"a runner of slice {h} lives without its slice"
            running[live[h].job_id] += 1
    assert all(n == 1 for n in running.values()), f"a job runs twice: {dict(running)}"
    if final:
        assert not live and not svc.fabric.attachments()
        assert {j.state for j in jobs.values()} == {"completed"}, {j.id: (j.state, j.reason) for j in jobs.values()}


def check_events(events: Path, job_ids: set[str]) -> dict[str, int]:
    """No job ran twice at the same time; every job ran every task to the end at least once."""
    spans: dict[tuple[str, str, str], list[float]] = {}
    for line in events.read_text().splitlines():
        what, job, slice_id, task, at = line.split()
        spans.setdefault((job, slice_id, task), [float("nan"), float("nan")])[0 if what == "start" else 1] = float(at)
    runs: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for (job, slice_id, _task), (start, end) in spans.items():
        lo, hi = runs[job].get(slice_id, [float("inf"), float("-inf")])
        runs[job][slice_id] = [min(lo, start), max(hi, end if end == end else float("inf"))]
    assert set(runs) == job_ids
    for job, by_slice in runs.items():
        ordered = sorted(by_slice.values())
        for (_, end1), (start2, _) in itertools.pairwise(ordered):
            assert end1 <= start2, f"job {job} ran twice at the same time"
    return {job: len(by_slice) for job, by_slice in runs.items()}


@pytest.mark.slow
def test_kill_9_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(5)
    db = f"sqlite:///{tmp_path / 'disagg.db'}"
    events = tmp_path / "events"
    store = Store(db)
    store.migrate()
    token = store.create_token("admin", admin=True)
    store.close()
    headers = {"Authorization": f"Bearer {token}"}
    settings = Settings(db=db, state_dir=str(tmp_path / "state"), latency_scale=SCALE)
    server = Server(tmp_path, db, ["--latency-scale", str(SCALE), "--tick-s", "0.02", "--round-gap-s", "0.02"])
    pending: list[tuple[str, dict[str, Any]]] = []
    submitted: dict[str, str] = {}
    seen: set[str] = set()
    n = 0

    def submit_pending() -> None:
        for key, b in list(pending):
            r = httpx.post(server.url + "/v1/jobs", json=b, headers={**headers, "Idempotency-Key": key}, timeout=5)
            assert r.status_code == 201, r.text
            submitted[key] = r.json()["id"]
            pending.remove((key, b))

    for trial in range(TRIALS):
        server.start()
        if rng.random() < 0.2:
            time.sleep(rng.uniform(0.0, 0.6))  # during start-up, migrations, reconciliation
        else:
            server.ready()
            for _ in range(rng.randint(1, 2)):
                n += 1
                pending.append((uuid.uuid4().hex, job_body(rng, events, n)))
            with contextlib.suppress(httpx.HTTPError):  # retried with the same key after the restart
                submit_pending()
            time.sleep(rng.uniform(0.0, 0.8))
        server.kill()
        if trial % 2 == 0:  # reconcile as the server would at start, then look at the world
            svc = open_service(settings)
            try:
                check(svc, seen)
            finally:
                svc.close()
    server.start()
    server.ready()
    submit_pending()

    def all_done() -> bool:
        jobs = httpx.get(server.url + "/v1/jobs", headers=headers, timeout=5).json()["jobs"]
        slices = httpx.get(server.url + "/v1/slices?state=tearing-down", headers=headers, timeout=5).json()
        return all(j["state"] == "completed" for j in jobs) and not slices["slices"]

    end = time.monotonic() + 120
    while not all_done():
        assert time.monotonic() < end, "jobs did not finish"
        time.sleep(0.2)
    server.kill()
    svc = open_service(settings)
    try:
        check(svc, seen, final=True)
    finally:
        svc.close()
    runs = check_events(events, set(submitted.values()))
    assert len(submitted) >= TRIALS // 2
    print(f"{TRIALS} kills, {len(submitted)} jobs, runs per job: {sorted(set(runs.values()))}")
