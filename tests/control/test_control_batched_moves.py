"""A round's job moves and device holds go to the database as one statement each (`store.lifecycle`:
`_all_or_none`), on SQLite and PostgreSQL. The batch stays only when every row of it was still as
read: a job moved meanwhile, or a device already held, sends the batch back (a savepoint) and the rows
go one by one, so the result is what the one-by-one writes made."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, select, update

from disagg.control.service import DEFAULT_CLUSTER
from disagg.model import load_cluster
from disagg.model.states import IllegalTransition, JobState
from disagg.store import Store, lifecycle
from disagg.store.jobs import new_job_row
from disagg.store.lifecycle import JobMove, hold_devices_of, move_jobs, new_jobs
from disagg.store.models import JobRow


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    s.migrate()
    s.sync_inventory(load_cluster(DEFAULT_CLUSTER))
    yield s
    s.close()


def _jobs(store: Store, n: int) -> list[str]:
    rows = [new_job_row("t", {"name": f"j{i}", "image": "rodinia/nw", "command": ["true"], "tasks": {"gpu": 1}},
                        None, None, 1.0) for i in range(n)]
    with store.write_core() as conn:
        new_jobs(conn, rows)
    return [r["id"] for r in rows]


def _updates(store: Store) -> list[int]:
    """Rows each UPDATE the test's writes sent carried: 1 per statement, N for one executemany of N."""
    sent: list[int] = []

    @event.listens_for(store.engine, "before_cursor_execute")
    def _seen(_conn: Any, _cursor: Any, statement: str, params: Any, _ctx: Any, many: bool) -> None:
        if statement.lstrip().upper().startswith("UPDATE"):
            sent.append(len(params) if many else 1)

    return sent


def _row(store: Store, job_id: str) -> tuple[str, str | None]:
    with store.read_core() as conn:
        state, slice_id = conn.execute(select(JobRow.state, JobRow.slice_id).where(JobRow.id == job_id)).one()
    return str(state), slice_id


def _placed(ids: list[str]) -> list[JobMove]:
    return [JobMove(j, JobState.COMPOSING, f"placed {j}", (JobState.QUEUED,), {"slice_id": f"s-{j}", "attempts": 1})
            for j in ids]


def test_a_rounds_job_moves_are_one_statement(store: Store) -> None:
    ids = _jobs(store, 6)
    sent = _updates(store)
    with store.write_core() as conn:
        made = move_jobs(conn, _placed(ids), 2.0)
    assert made == [(j, JobState.QUEUED) for j in ids]
    assert sent == [6]
    for j in ids:
        assert [(e["from"], e["to"], e["slice"]) for e in store.job_events(j)] == [
            (None, "queued", None), ("queued", "composing", f"s-{j}")]
        assert _row(store, j) == (JobState.COMPOSING, f"s-{j}")


def test_a_job_moved_between_the_read_and_the_write_is_left_and_the_rest_move_once(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel that lands after `move_jobs` read the states (on PostgreSQL, another transaction; here
    made inside the read): its job's compare-and-set fails, so the batch is rolled back and the moves go
    one by one — the cancelled job stays cancelled, each other job moves once, with one event each."""
    ids = _jobs(store, 5)
    read = lifecycle._current

    def _current_then_cancel(conn: Any, table: Any, wanted: list[str]) -> dict[str, tuple[str, str | None]]:
        out = read(conn, table, wanted)
        conn.execute(update(JobRow).where(JobRow.id == ids[2]).values(state=JobState.CANCELLED))
        return out

    monkeypatch.setattr(lifecycle, "_current", _current_then_cancel)
    sent = _updates(store)
    with store.write_core() as conn:
        made = move_jobs(conn, _placed(ids), 2.0)
    assert made == [(j, JobState.QUEUED) for j in ids if j != ids[2]]
    assert sent == [1, 5, 1, 1, 1, 1, 1]  # the cancel's UPDATE, the batch, then one by one
    assert _row(store, ids[2]) == (JobState.CANCELLED, None)
    assert [e["to"] for e in store.job_events(ids[2])] == ["queued"]
    for j in ids[:2] + ids[3:]:
        assert [e["to"] for e in store.job_events(j)] == ["queued", "composing"]
        assert _row(store, j) == (JobState.COMPOSING, f"s-{j}")


def test_devices_held_in_one_statement_and_a_held_one_among_them_is_named(store: Store) -> None:
    sent = _updates(store)
    with store.write_core() as conn:
        hold_devices_of(conn, {"s-1": ["iobox0/gpu0", "iobox0/gpu1"], "s-2": ["iobox1/nvme0"]})
    assert sent == [3]
    sent.clear()
    with pytest.raises(IllegalTransition, match="iobox0/gpu1: held by s-1"), store.write_core() as conn:
        hold_devices_of(conn, {"s-3": ["iobox0/gpu2", "iobox0/gpu3"], "s-4": ["iobox0/gpu1", "iobox1/nvme1"]})
    assert sent[0] == 4 and sent[1:] == [1, 1, 1]  # the batch, then one by one up to the one held
    # the failed commit took nothing, not even the devices the batch or the rows before it got
    assert {d["id"]: d["slice"] for d in store.devices_view() if d["slice"]} == {
        "iobox0/gpu0": "s-1", "iobox0/gpu1": "s-1", "iobox1/nvme0": "s-2"}


def test_each_jobs_first_placement_is_read_as_the_earliest_slice(store: Store) -> None:
    """`first_placed_at` (what `bench controller` times submit → placed by): per job, its first slice's
    creation time, compositions (no job) left out."""
    jobs = _jobs(store, 2)
    rows = [(jobs[0], "s-a", 5.0), (jobs[0], "s-b", 3.0), (jobs[1], "s-c", 4.0), (None, "s-d", 1.0)]
    with store.write_core() as conn:
        lifecycle.new_slices(conn, [
            {"id": sid, "job_id": job, "attempt": 1, "state": "composing", "outcome": None, "detail": None,
             "placement": {"machines": [], "tasks": []}, "handle": None, "created_at": at, "updated_at": at}
            for job, sid, at in rows], 6.0)
    assert store.first_placed_at() == {jobs[0]: 3.0, jobs[1]: 4.0}
