"""The store's job operations: submissions, the queue a round reads, cancel, and a job's history.

Every change of a job's state goes through `disagg.store.lifecycle` (guarded, with its event).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Table, bindparam, select

from disagg.model import DEVICE_KINDS, Job, TaskRequest
from disagg.model.states import ACTIVE_SLICE_STATES, JobState, SliceOutcome, SliceState
from disagg.store.base import StoreBase
from disagg.store.batch import GroupInsert
from disagg.store.lifecycle import job_events, move_job, move_slice, new_jobs
from disagg.store.models import JobRow, SliceRow

_jobs: Table = JobRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]
_JOB_BY_ID = select(_jobs).where(_jobs.c.id == bindparam("k_id"))
#: What a job shows of itself (`job_dict`), by column: not its order key nor its idempotency record.
_SHOWN = tuple(c for c in _jobs.c if c.key not in ("seq", "idempotency_key", "request_hash"))
#: Jobs that a cancel still stops.
_CANCELLABLE = (JobState.QUEUED, JobState.COMPOSING, JobState.RUNNING)


class IdempotencyConflict(ValueError):
    """The same idempotency key was used with a different request body."""


def model_job(row: Any) -> Job:
    """A stored job as the policies see it (its id is its name). `row`: a job row or its columns."""
    t = row.tasks
    devices: dict[str, int] = {k: int(t.get(k, 0)) for k in DEVICE_KINDS if int(t.get(k, 0) or 0) > 0}
    models: dict[str, str] = {k: str(t[f"{k}_model"]) for k in DEVICE_KINDS if t.get(f"{k}_model")}
    return Job(
        name=row.id,
        image=row.image,
        submit_s=row.submitted_at,
        importance=row.importance,
        slo_s=row.slo_s,
        wait_rounds=row.wait_rounds,
        command=tuple(row.command),
        tasks=TaskRequest(
            int(t.get("count", 1)), float(t.get("cpus", 1.0)), float(t.get("memory_gb", 1.0)), devices, models
        ),
    )


def job_dict(r: Any) -> dict[str, Any]:
    """A job as the API shows it (`r`: a job row, or a mapping of its stored columns)."""
    get = r.get if isinstance(r, dict) else lambda k: getattr(r, k)
    out: dict[str, Any] = {("slice" if c.key == "slice_id" else c.key): get(c.key) for c in _SHOWN}
    out["command"] = list(out["command"])
    out["tasks"] = dict(out["tasks"])
    return out


class JobOps(StoreBase):
    """Submissions, the queue, cancel, history."""

    def submissions(self) -> GroupInsert:
        """A group writer for new jobs: rows from `new_job_row` are committed in batches, each job with its
        `submitted` event; `insert(row)` returns a Future set once the row is stored."""
        return GroupInsert(self, lambda conn, rows: new_jobs(conn, rows, time.time()))

    def queued_jobs(self, window: int) -> list[Job]:
        """The `window` oldest queued jobs, oldest first, as the policies see them."""
        query = select(_jobs).where(_jobs.c.state == JobState.QUEUED).order_by(_jobs.c.seq).limit(window)
        with self.read_core() as conn:
            return [model_job(r) for r in conn.execute(query)]

    def job_by_key(self, tenant: str, key: str, digest: str) -> dict[str, Any] | None:
        """The job `tenant` submitted with Idempotency-Key `key`, if any; IdempotencyConflict when that
        job's request body (its `digest`) differs."""
        query = select(_jobs).where(_jobs.c.tenant == tenant, _jobs.c.idempotency_key == key)
        with self.read_core() as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        if row.request_hash != digest:
            raise IdempotencyConflict(
                f"Idempotency-Key {key!r} was used for job {row.id} with a different request body")
        return job_dict(row)

    def cancel_job(self, job_id: str) -> dict[str, Any] | None:
        """Cancel a job: a queued one stops waiting; a live slice goes to teardown. Safe to repeat; None
        when there is no such job."""
        now = time.time()
        with self.write_core(urgent=True) as conn:
            row = conn.execute(_JOB_BY_ID, {"k_id": job_id}).first()
            if row is None:
                return None
            if move_job(conn, job_id, JobState.CANCELLED, "cancelled by user", _CANCELLABLE, now,
                        reason="cancelled by user", reason_code="cancelled") and row.slice_id is not None:
                move_slice(conn, row.slice_id, SliceState.TEARING_DOWN, "cancelled by user", ACTIVE_SLICE_STATES,
                           now, outcome=SliceOutcome.CANCELLED, detail="cancelled by user")
            row = conn.execute(_JOB_BY_ID, {"k_id": job_id}).first()
        return job_dict(row)

    def job_handle(self, job_id: str) -> str | None:
        """The engine's handle of the job's latest slice (its slice id when the engine gave none)."""
        query = (select(_slices.c.id, _slices.c.handle).join(_jobs, _jobs.c.slice_id == _slices.c.id)
                 .where(_jobs.c.id == job_id))
        with self.read_core() as conn:
            row = conn.execute(query).first()
        return None if row is None else str(row.handle or row.id)

    def job_events(self, job_id: str) -> list[dict[str, Any]]:
        """The job's transitions and its slices', oldest first: from, to, when, why."""
        with self.read_core() as conn:
            return job_events(conn, job_id)


__all__ = ["IdempotencyConflict", "JobOps", "job_dict", "model_job"]
