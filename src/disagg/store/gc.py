"""Retention: the rows of jobs that ended long ago go, with their slices, steps and events.

The controller's loop (and `disagg gc`) asks for the jobs that ended before a moment, has the engine
forget their slices' files first, then deletes their rows here, in batches: a crash between the two
leaves rows whose files are gone, never files the store does not know (which a start would take for
a lost store, `disagg.control.recovery`).
"""

from __future__ import annotations

from sqlalchemy import delete, exists, func, select

from disagg.model.states import JOB_FINAL, SliceState
from disagg.store.base import StoreBase
from disagg.store.marks import raise_floor
from disagg.store.models import EventRow, JobRow, SliceRow, StepRow

_FINAL = tuple(st.value for st in JOB_FINAL)
#: A job whose slice is not done still has something in the world: a slice tearing down gives its devices
#: back and records its steps (a job ends before its slice does). Deleting its rows then failed the
#: teardown's writes (a foreign key) and left the device attached to a slice the store no longer had: held
#: for good, every other job's placement on it a conflict, the next start refused.
_SLICE_LIVE = exists().where(SliceRow.job_id == JobRow.id, SliceRow.state != SliceState.DONE.value)


class GcOps(StoreBase):
    """Finding and deleting ended jobs past their retention."""

    def ended_before(self, before: float, limit: int = 500) -> dict[str, list[tuple[str, str | None]]]:
        """Jobs that ended before `before` (their last change), at most `limit`: job → [(slice, handle)]."""
        query = (select(JobRow.id).where(JobRow.state.in_(_FINAL), JobRow.updated_at < before, ~_SLICE_LIVE)
                 .order_by(JobRow.updated_at).limit(limit))
        with self.read_core() as conn:
            jobs: dict[str, list[tuple[str, str | None]]] = {str(j): [] for j in conn.execute(query).scalars()}
            if jobs:
                rows = conn.execute(select(SliceRow.job_id, SliceRow.id, SliceRow.handle)
                                    .where(SliceRow.job_id.in_(list(jobs))))
                for job_id, slice_id, handle in rows:
                    jobs[str(job_id)].append((str(slice_id), handle))
        return jobs

    def removable(self, job_id: str) -> tuple[str | None, str | None, list[tuple[str, str | None]]]:
        """Whether one job's record may go now: (its state, or None for no such job; its slice that is not
        done, if any; its slices and their handles, whose files go first)."""
        with self.read_core() as conn:
            state = conn.execute(select(JobRow.state).where(JobRow.id == job_id)).scalar()
            rows = conn.execute(select(SliceRow.id, SliceRow.handle, SliceRow.state)
                                .where(SliceRow.job_id == job_id)).all()
        live = next((str(r.id) for r in rows if r.state != SliceState.DONE.value), None)
        return (None if state is None else str(state)), live, [(str(r.id), r.handle) for r in rows]

    def delete_jobs(self, job_ids: list[str]) -> int:
        """Delete the ended jobs among `job_ids` with their slices, steps and events; how many went."""
        if not job_ids:
            return 0
        with self.write_core() as conn:
            ended = [str(j) for j in conn.execute(
                select(JobRow.id).where(JobRow.id.in_(job_ids), JobRow.state.in_(_FINAL), ~_SLICE_LIVE)).scalars()]
            if not ended:
                return 0
            slices = select(SliceRow.id).where(SliceRow.job_id.in_(ended))
            top = conn.execute(select(func.max(EventRow.id)).where(EventRow.job_id.in_(ended))).scalar()
            conn.execute(delete(StepRow).where(StepRow.slice_id.in_(slices)))
            conn.execute(delete(EventRow).where(EventRow.job_id.in_(ended)))
            conn.execute(delete(SliceRow).where(SliceRow.job_id.in_(ended)))
            conn.execute(delete(JobRow).where(JobRow.id.in_(ended)))
            if top is not None:
                raise_floor(conn, int(top))
        return len(ended)


__all__ = ["GcOps"]
