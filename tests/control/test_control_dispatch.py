"""The loop under a backlog of compositions: a dispatch reads only what a fair pick can use, a poll
ends every finished slice in one write, and the loop's writes go ahead of the slice workers'."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from control_helpers import make_service, submit

from disagg.control.slice import fair_pick
from disagg.model.states import JobState, SliceState
from disagg.store import Principal, Store

ADMIN = Principal("admin", admin=True)


def test_a_dispatch_reads_each_tenants_oldest_slices_and_picks_as_from_the_whole_backlog(tmp_path: Path,
                                                                                        db_url: str) -> None:
    svc = make_service(tmp_path, db=db_url)  # no loop: the round's slices stay composing
    try:
        for tenant, n in (("alice", 12), ("bob", 3), ("carol", 1)):
            for _ in range(n):
                submit(svc, tenant, gpu=0, cpus=0.1, memory_gb=0.1)
        svc.controller.schedule()
        whole = svc.store.slices_to_work()
        assert len(whole) == 16 and {s for _, s, _ in whole} == {SliceState.COMPOSING}
        for k in (1, 2, 5, 20):
            some = svc.store.slices_to_work(per_tenant=k)
            kept = Counter(t for _, _, t in some)
            assert kept == {t: min(k, n) for t, n in Counter(t for _, _, t in whole).items()}
            assert some == [w for w in whole if w in some]  # oldest first, each tenant's oldest k
            for free in range(1, k + 1):  # what k workers can take is the same from either list
                for busy in ({}, {"alice": 1}, {"bob": 2, "carol": 1}):
                    assert fair_pick(some, busy, free) == fair_pick(whole, busy, free)
    finally:
        svc.close()


def test_the_ended_slices_of_a_poll_end_together_and_only_once(tmp_path: Path, db_url: str) -> None:
    svc = make_service(tmp_path, db=db_url)
    try:
        jobs = [submit(svc, "alice", gpu=0, cpus=0.1, memory_gb=0.1, command=["sleep", "30"]) for _ in range(3)]
        svc.controller.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(svc.store.running_slices()) < 3:
            time.sleep(0.05)
        svc.controller.stop()  # no poll of its own from here: the test ends the slices
        running = [slice_id for slice_id, _ in svc.store.running_slices()]
        assert len(running) == 3
        ended = [(running[0], JobState.COMPLETED, 0), (running[1], JobState.FAILED, 3),
                 ("s-nope", JobState.COMPLETED, 0), (running[2], JobState.COMPLETED, 0)]
        assert svc.store.finish_slices(ended) == [True, True, False, True]
        assert svc.store.finish_slices(ended) == [False] * 4  # once only: they are tearing down now
        states = {svc.store.load_slice(s).state for s in running}
        assert states == {SliceState.TEARING_DOWN}
        by_job = {j: svc.store.job_view(j, ADMIN) for j in jobs}
        assert sorted((v or {})["state"] for v in by_job.values()) == ["completed", "completed", "failed"]
        assert sorted((v or {})["exit_code"] for v in by_job.values()) == [0, 0, 3]
    finally:
        svc.close()


def _wait_for_waiters(store: Store, n: int) -> None:
    """Until `n` writers wait for SQLite's writer lock in this process (a loaded host starts threads late)."""
    queue = store._writers
    assert queue is not None
    deadline = time.monotonic() + 20
    while len(queue._urgent) + len(queue._normal) < n:
        assert time.monotonic() < deadline, f"{n} writers never queued"
        time.sleep(0.005)


def _write_order(store: Store, last: Callable[[], None]) -> list[str]:
    """Who writes in which order: a writer holds SQLite's writer lock while five workers queue for it, each
    waiting before the next comes, then `last` (a write of its own); then the holder lets go."""
    order: list[str] = []
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with store.write_core():
            held.set()
            release.wait(10)
            order.append("holder")

    def worker(name: str) -> None:
        with store.write_core():
            order.append(name)

    def final() -> None:
        last()
        order.append("last")

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    held.wait(10)
    for n, (target, args) in enumerate([*((worker, (f"worker{i}",)) for i in range(5)), (final, ())]):
        t = threading.Thread(target=target, args=args)
        t.start()
        threads.append(t)
        _wait_for_waiters(store, n + 1)
    release.set()
    for t in threads:
        t.join(10)
    return order


def test_the_loops_writes_go_ahead_of_the_writers_already_waiting(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'w.db'}")
    store.migrate()

    def loop_write() -> None:
        store.write_first()
        with store.write_core():
            pass

    order = _write_order(store, loop_write)
    store.close()
    assert order == ["holder", "last", *(f"worker{i}" for i in range(5))]


def test_notes_on_many_jobs_are_one_event_each_in_the_jobs_state(tmp_path: Path, db_url: str) -> None:
    svc = make_service(tmp_path, db=db_url)
    try:
        jobs = [submit(svc, "alice", gpu=0, cpus=0.1, memory_gb=0.1) for _ in range(1203)]  # past one IN (...)
        notes = {j: f"note {i}" for i, j in enumerate(jobs)}
        svc.store.note_jobs({**notes, "j-000000000000": "nobody"})
        for i in (0, 500, 1202):
            events = [e for e in svc.store.job_events(jobs[i]) if e.get("why") == f"note {i}"]
            assert len(events) == 1 and events[0]["from"] == events[0]["to"] == "queued", events
        assert svc.store.job_events("j-000000000000") == [] or all(
            e.get("why") != "nobody" for e in svc.store.job_events("j-000000000000"))
    finally:
        svc.close()


def test_a_lease_renewal_goes_ahead_of_the_workers_waiting_to_write(tmp_path: Path) -> None:
    """Behind sixteen workers' steps, a lone controller's renewal lapsed under load and it stepped down."""
    store = Store(f"sqlite:///{tmp_path / 'w.db'}")
    store.migrate()
    epoch = store.acquire_lease("me", 3.0, force=True)
    assert epoch is not None
    renewed: list[bool] = []
    order = _write_order(store, lambda: renewed.append(store.renew_lease("me", epoch, 3.0)))
    store.close()
    assert renewed == [True] and order[:2] == ["holder", "last"], order


def test_one_dispatch_reads_at_a_time_and_a_worker_reads_again_when_asked(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Sixteen workers finishing together each asked for a read of every waiting slice (half a core under
    `bench controller`): now a call during a read asks that read to run once more and returns."""
    svc = make_service(tmp_path)  # no loop: the round's slices stay composing
    try:
        for _ in range(4):
            submit(svc, "alice", gpu=0, cpus=0.1, memory_gb=0.1)
        svc.controller.schedule()
        waiting = svc.store.slices_to_work()
        assert len(waiting) == 4
        real, inside, release = svc.store.slices_to_work, threading.Event(), threading.Event()
        reads: list[int] = []
        at_once = [0, 0]  # now, most

        def slow_read(per_tenant: int | None = None) -> list[tuple[str, SliceState, str]]:
            at_once[0] += 1
            at_once[1] = max(at_once)
            reads.append(len(reads))
            try:
                if len(reads) == 1:  # the first read: nothing was waiting yet when it looked
                    inside.set()
                    assert release.wait(10)
                    return []
                return real(per_tenant=per_tenant)
            finally:
                at_once[0] -= 1

        handed: list[str] = []
        monkeypatch.setattr(svc.store, "slices_to_work", slow_read)
        monkeypatch.setattr(svc.controller._pool, "submit", lambda fn, slice_id, state: handed.append(slice_id))
        first = threading.Thread(target=svc.controller.dispatch, kwargs={"worker": True})
        first.start()
        assert inside.wait(10)
        skipped = waiting[0][0]
        for k in range(5):  # workers done meanwhile: none reads, each returns at once
            svc.controller.dispatch(skip=skipped if k == 0 else None, worker=True)
        assert len(reads) == 1
        release.set()
        first.join(10)
        assert len(reads) == 2 and at_once[1] == 1       # read once more, never two at once
        assert sorted(handed) == sorted(w[0] for w in waiting[1:])  # the worker's own slice waits a tick

        # the loop's own call reads once, even when asked again during its read: it goes back to placing
        reads.clear()
        inside.clear()
        release.clear()
        loop_call = threading.Thread(target=svc.controller.dispatch)
        loop_call.start()
        assert inside.wait(10)
        svc.controller.dispatch(worker=True)
        release.set()
        loop_call.join(10)
        assert len(reads) == 1
    finally:
        svc.close()
