"""The store's side of an operator's actions on jobs (hold, release, requeue) and of a job's true times.

Hold keeps a queued job out of placement (the rounds read queued jobs only) until released to the
queue; requeue stops a composing or running job (its slice torn down with the outcome `preempted`:
not a failure, its retries kept) and puts it back in the queue. Every move goes through the guarded
writer (`lifecycle.move_job`, `move_slice`), so each leaves an event with why.

A job's times come from its events, for a page of jobs in one query: `started_at` is when its latest
attempt started running, `ended_at` when it reached a final state; `waited_s` is submission to its
first start (or to now), `ran_s` its latest attempt's start to its end (or to now).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Table, bindparam, func, select

from disagg.model import Job
from disagg.model.states import (
    ACTIVE_SLICE_STATES,
    HOLDABLE,
    JOB_FINAL,
    RELEASABLE,
    JobReason,
    JobState,
    SliceOutcome,
    SliceState,
)
from disagg.store.base import StoreBase
from disagg.store.jobs import model_job
from disagg.store.lifecycle import JobMove, move_job, move_jobs, move_queued, move_slice
from disagg.store.models import EventRow, JobRow

_jobs: Table = JobRow.__table__  # type: ignore[assignment]
_events: Table = EventRow.__table__  # type: ignore[assignment]
_JOB_BY_ID = select(_jobs).where(_jobs.c.id == bindparam("k_id"))
_FINAL = tuple(str(s) for s in JOB_FINAL)


class NotInState(ValueError):
    """The job is not in a state the action applies to; says which it is in and which it needs."""

    def __init__(self, job_id: str, action: str, state: str, allowed: Iterable[str]) -> None:
        super().__init__(f"job {job_id} is {state}; {action} applies to a job that is {' or '.join(allowed)}")
        self.state = state


class OperatorOps(StoreBase):
    """Hold, release and requeue a job; the true times of jobs."""

    def hold_job(self, job_id: str, who: str) -> str | None:
        """Keep a queued job out of placement; its state now (None: no such job). NotInState otherwise."""
        why = f"held by {who}"
        return self._move(job_id, "hold", JobState.HELD, HOLDABLE, why, reason=why, reason_code=JobReason.HELD)

    def release_job(self, job_id: str, who: str) -> str | None:
        """Put a held job back in the queue."""
        return self._move(job_id, "release", JobState.QUEUED, RELEASABLE, f"released by {who}", reason=None,
                          reason_code=JobReason.NEW)

    def hold_jobs(self, why: dict[str, str], code: JobReason) -> list[str]:
        """Hold queued jobs out of placement as `hold_job` does, for the controller's own reason (job → why,
        reason `code`); those moved (a job placed or cancelled since is left alone)."""
        if not why:
            return []
        with self.write_core(urgent=True) as conn:
            return move_queued(conn, JobState.HELD, why, code, time.time())

    def release_jobs(self, job_ids: Iterable[str], why: str) -> list[str]:
        """Put held jobs back in the queue (`release_job` for the controller); those moved."""
        moves = [JobMove(j, JobState.QUEUED, why, RELEASABLE, {"reason": None, "reason_code": JobReason.NEW})
                 for j in job_ids]
        if not moves:
            return []
        with self.write_core(urgent=True) as conn:
            return [j for j, _ in move_jobs(conn, moves, time.time())]

    def held_for(self, code: JobReason) -> list[Job]:
        """The held jobs whose reason is `code`, as the policies see jobs."""
        query = select(_jobs).where(_jobs.c.state == JobState.HELD, _jobs.c.reason_code == code)
        with self.read_core() as conn:
            return [model_job(r) for r in conn.execute(query)]

    def _move(self, job_id: str, action: str, to: JobState, expect: tuple[JobState, ...], why: str,
              **values: Any) -> str | None:
        with self.write_core(urgent=True) as conn:
            row = conn.execute(_JOB_BY_ID, {"k_id": job_id}).first()
            if row is None:
                return None
            if row.state != to and move_job(conn, job_id, to, why, expect, time.time(), **values) is None:
                raise NotInState(job_id, action, row.state, expect)
        return str(to)

    def requeue_job(self, job_id: str, who: str) -> str | None:
        """Stop a composing or running job and queue it again (a queued one stays as it is). Its slice goes to
        teardown with the outcome `preempted`, so it is re-queued whatever its retries. None: no such job."""
        with self.write_core(urgent=True) as conn:
            row = conn.execute(_JOB_BY_ID, {"k_id": job_id}).first()
            if row is None:
                return None
            state = JobState(row.state)
            if state is JobState.QUEUED:
                return str(state)
            if not state.live or row.slice_id is None:
                raise NotInState(job_id, "requeue", state, (JobState.QUEUED, JobState.COMPOSING, JobState.RUNNING))
            detail = f"re-queued by {who}"
            move_slice(conn, row.slice_id, SliceState.TEARING_DOWN, detail, ACTIVE_SLICE_STATES, time.time(),
                       outcome=SliceOutcome.PREEMPTED, detail=detail)
        return str(state)

    def job_times(self, jobs: Iterable[dict[str, Any]], now: float | None = None) -> dict[str, dict[str, Any]]:
        """Each job's submitted, started and ended times, how long it waited until it first started and
        how long its latest attempt ran (to now while it runs), from its events (one query)."""
        jobs = list(jobs)
        now = time.time() if now is None else now
        ids = [j["id"] for j in jobs]
        first: dict[str, float] = {}
        last: dict[str, float] = {}
        ended: dict[str, float] = {}
        e = _events.c
        query = (select(e.job_id, e.to_state, func.min(e.at), func.max(e.at))
                 .where(e.subject == "job", e.job_id.in_(bindparam("ids", expanding=True)),
                        e.to_state.in_((JobState.RUNNING, *_FINAL)))
                 .group_by(e.job_id, e.to_state))
        with self.read_core() as conn:
            for i in range(0, len(ids), 500):
                for job_id, to, lo, hi in conn.execute(query, {"ids": ids[i:i + 500]}):
                    if to == JobState.RUNNING:
                        first[job_id], last[job_id] = float(lo), float(hi)
                    else:
                        ended[job_id] = float(hi)
        return {j["id"]: _times(j, first.get(j["id"]), last.get(j["id"]), ended.get(j["id"]), now) for j in jobs}


def _times(job: dict[str, Any], first: float | None, last: float | None, ended: float | None,
           now: float) -> dict[str, Any]:
    """A job's times (see the module's docstring); a job that ended without running waited until it ended."""
    submitted = float(job["submitted_at"])
    state = JobState(job["state"])
    # the latest attempt's start: none while it waits again (re-queued, held) or composes anew
    started = last if state is JobState.RUNNING or state.final else None
    end = ended if state.final else None
    waited_until = first if first is not None else (end if end is not None else now)
    ran = None
    if started is not None and (end is None or end >= started):
        ran = (end if end is not None else (now if job["state"] == JobState.RUNNING else None))
        ran = None if ran is None else max(0.0, ran - started)
    return {"started_at": started, "ended_at": end, "waited_s": max(0.0, waited_until - submitted), "ran_s": ran}


__all__ = ["NotInState", "OperatorOps"]
