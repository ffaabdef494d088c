"""/v1/jobs: submit, list, show, cancel a job, and read its logs.

A tenant sees and touches only its own jobs: another tenant's job answers 404, as an unknown one
does. POST honours an `Idempotency-Key` header: the same key and body give back the first job; the
same key with another body answers 409.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request

from disagg.api import schemas as S
from disagg.api.deps import Jobs, StoreDep, Who
from disagg.api.errors import R400, R401, R404, R409, R422, R429, ApiError
from disagg.api.paging import DEFAULT_LIMIT, Cursor, Limit, decode_cursor, next_link
from disagg.control.jobs import JobRejected, QueueFull
from disagg.store import IdempotencyConflict, Principal, Store

router = APIRouter()

JobId = Annotated[str, Path(max_length=64, description="A job id, e.g. j-0123456789ab.")]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=256,
        pattern=r"^[\x21-\x7e]+$",
        description="Repeat a POST safely: the same key and body return the first job.",
    ),
]


def _job(store: Store, job_id: str, who: Principal) -> dict[str, Any]:
    """The job as `who` may see it, or 404 (for another tenant's job too)."""
    out = store.job_view(job_id, who)
    if out is None:
        raise ApiError(404, f"no job {job_id!r}")
    return out


def _check_own(store: Store, job_id: str, who: Principal) -> None:
    if not store.job_visible(job_id, who):
        raise ApiError(404, f"no job {job_id!r}")


@router.post(
    "/v1/jobs",
    status_code=201,
    response_model=S.JobOut,
    tags=["jobs"],
    responses={**R400, **R401, **R409, **R422, **R429},
)
async def submit_job(body: S.JobIn, who: Who, jobs: Jobs, idempotency_key: IdempotencyKey = None) -> dict[str, Any]:
    """Submit a job. It is queued and placed by the next scheduling round."""
    t0 = time.perf_counter()
    try:
        job, _created = await jobs.submit_async(who.tenant, body.model_dump(), idempotency_key)
    except JobRejected as exc:
        raise ApiError(422, str(exc), [{"field": exc.field, "message": str(exc)}]) from None
    except IdempotencyConflict as exc:
        raise ApiError(409, str(exc)) from None
    except QueueFull as exc:
        raise ApiError(429, str(exc)) from None
    jobs.metrics.submit_seconds.observe(time.perf_counter() - t0)
    job["placement"] = None
    return job


@router.get("/v1/jobs", response_model=S.JobList, tags=["jobs"], responses={**R401, **R422})
def list_jobs(
    request: Request,
    who: Who,
    store: StoreDep,
    state: S.JobState | None = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Jobs of the caller's tenant (all jobs for an admin), newest first, a page at a time (`next`)."""
    jobs, key = store.jobs_page(who, state, limit, decode_cursor(cursor, 2))
    return {"jobs": jobs, "next": next_link(request, key)}


@router.get("/v1/jobs/{job_id}", response_model=S.JobOut, tags=["jobs"], responses={**R401, **R404, **R422})
def get_job(job_id: JobId, who: Who, store: StoreDep) -> dict[str, Any]:
    """A job: its state, its placement and slice, and why it waits."""
    return _job(store, job_id, who)


@router.delete("/v1/jobs/{job_id}", response_model=S.JobOut, tags=["jobs"], responses={**R401, **R404, **R422})
def cancel_job(job_id: JobId, who: Who, store: StoreDep, jobs: Jobs) -> dict[str, Any]:
    """Cancel a job; its slice, if any, is torn down. Repeating it is harmless."""
    _check_own(store, job_id, who)
    jobs.cancel(job_id)
    return _job(store, job_id, who)


#: The most a page of logs holds, bytes (and what it holds by default).
MAX_LOG_PAGE = 2**20
DEFAULT_LOG_PAGE = 256 * 2**10
LogLimit = Annotated[int, Query(ge=1, le=MAX_LOG_PAGE, description=f"Bytes, at most {MAX_LOG_PAGE}.")]


@router.get("/v1/jobs/{job_id}/logs", response_model=S.LogsOut, tags=["jobs"], responses={**R401, **R404, **R422})
def job_logs(
    job_id: JobId,
    who: Who,
    store: StoreDep,
    jobs: Jobs,
    offset: Annotated[int, Query(ge=0, le=2**62, description="The first byte of the page.")] = 0,
    limit: LogLimit = DEFAULT_LOG_PAGE,
) -> dict[str, Any]:
    """A page of what the job's tasks wrote (stdout and stderr; `[task i] ` before each line when it has
    several tasks), for its latest attempt: ask again from `next_offset` to follow it."""
    _check_own(store, job_id, who)
    return jobs.log_page(job_id, offset, limit)


@router.get("/v1/jobs/{job_id}/events", response_model=S.EventList, response_model_by_alias=True, tags=["jobs"],
            responses={**R401, **R404, **R422})
def job_events(job_id: JobId, request: Request, who: Who, store: StoreDep, limit: Limit = DEFAULT_LIMIT,
               cursor: Cursor = None) -> dict[str, Any]:
    """The job's history, oldest first: each transition of the job and of its slices, with why
    (e.g. "re-queued: device iobox0/gpu4 failed"), a page at a time (`next`)."""
    _check_own(store, job_id, who)
    key = decode_cursor(cursor, 1)
    events = store.job_events(job_id, int(key[0]) if key else None, limit + 1)
    more = len(events) > limit
    events = events[:limit]
    return {"job": job_id, "events": events, "next": next_link(request, [events[-1]["id"]] if more else None)}
