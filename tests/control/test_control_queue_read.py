"""A round's read of the queue: each queued job is made into the policies' `Job` once, and afterwards
only its id and W are read; what the round gets is what reading every row whole would give."""

from __future__ import annotations

import threading
from pathlib import Path

from control_helpers import make_service, submit
from sqlalchemy import event, select, update

from disagg.model import Job
from disagg.model.states import JobState
from disagg.store import Store
from disagg.store.jobs import model_job
from disagg.store.models import JobRow
from disagg.store.snapshot import live_slices_placed


def _whole(svc: object, window: int) -> list[Job]:
    """The window read the plain way: every column of every row, made anew."""
    with svc.store.read() as s:  # type: ignore[attr-defined]
        rows = s.scalars(select(JobRow).where(JobRow.state == JobState.QUEUED).order_by(JobRow.seq).limit(window))
        return [model_job(r) for r in rows]


def test_the_queue_read_keeps_each_jobs_model_and_reads_only_its_wait(tmp_path: Path, db_url: str) -> None:
    svc = make_service(tmp_path, db=db_url)  # no loop: the queue stays as the test leaves it
    try:
        ids = [submit(svc, "alice" if k % 2 else "bob", gpu=k % 3, cpus=0.5 + k, memory_gb=1.0 + k) for k in range(6)]
        first = svc.store.queued_jobs(4)
        assert first == _whole(svc, 4) and [j.name for j in first] == ids[:4]

        with svc.store.write() as s:  # two rounds' waits for some, as a commit's `_note_waits` counts them
            s.execute(update(JobRow).where(JobRow.id.in_(ids[1:3])).values(wait_rounds=JobRow.wait_rounds + 2))
        svc.jobs.cancel(ids[0])
        statements: list[tuple[str, int]] = []
        me = threading.get_ident()

        def listen(_conn: object, _cursor: object, statement: str, parameters: tuple[object, ...], *_: object) -> None:
            if threading.get_ident() == me:
                statements.append((statement, len(parameters or ())))

        event.listen(svc.store.read_engine, "before_cursor_execute", listen)
        try:
            again = svc.store.queued_jobs(5)
        finally:
            event.remove(svc.store.read_engine, "before_cursor_execute", listen)
        assert again == _whole(svc, 5)
        assert [j.name for j in again] == ids[1:6] and [j.wait_rounds for j in again] == [2, 2, 0, 0, 0]
        whole = [n for q, n in statements if "jobs.command" in q]   # a read of whole rows names every column
        assert whole == [2], statements                          # once, for the two jobs not seen before
        assert again[2] is first[3]                                # a job whose W did not move: the same model
    finally:
        svc.close()


def test_a_rounds_new_slices_are_not_read_back_and_read_as_a_fresh_store_reads_them(tmp_path: Path,
                                                                                    db_url: str) -> None:
    """The commit keeps the placements it wrote: the next snapshot neither reads nor parses them, and
    what it holds is what a store that never saw them reads from the rows."""
    svc = make_service(tmp_path, db=db_url)  # no loop: the round's slices stay composing
    try:
        for k in range(8):  # more GPUs than the machines have: some go to the pool's, remote
            submit(svc, "alice", gpu=1 + k % 2, cpus=1.0, memory_gb=2.0)
        svc.controller.schedule()
        statements: list[str] = []
        me = threading.get_ident()

        def listen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
            if threading.get_ident() == me:
                statements.append(statement)

        event.listen(svc.store.read_engine, "before_cursor_execute", listen)
        try:
            kept = svc.store.cluster()
        finally:
            event.remove(svc.store.read_engine, "before_cursor_execute", listen)
        assert statements and not [q for q in statements if "slices.placement" in q], statements
        fresh = Store(db_url)
        try:
            again = fresh.cluster()
            with fresh.read_core() as conn:
                parsed = {i: p for i, _, p in live_slices_placed(conn)}
        finally:
            fresh.close()
        with svc.store.read_core() as conn:  # the kept placements are the parsed ones, field by field
            assert {i: p for i, _, p in live_slices_placed(conn)} == parsed
        assert sorted(kept.allocations, key=repr) == sorted(again.allocations, key=repr)
        assert len({a.job for a in kept.allocations}) >= 4                      # the round placed some
        assert any(d.startswith("iobox") for a in kept.allocations for d in a.devices)  # a remote GPU among them
    finally:
        svc.close()

