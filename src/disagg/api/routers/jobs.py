"""/v1/jobs: submit, list, show, cancel, remove a job, and read its logs and history.

A tenant sees and touches only its own jobs: another tenant's job answers 404, as an unknown one
does. POST honours an `Idempotency-Key` header: the same key and body give back the first job; the
same key with another body answers 409. Wherever a route takes a job id, any unique beginning of it
does (`j-b642`, as git and docker take ids); a beginning several of the caller's jobs share answers 409
naming them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response

from disagg.api import schemas as S
from disagg.api.deps import Admin, Jobs, StoreDep, Who
from disagg.api.errors import R400, R401, R403, R404, R409, R422, R429, ApiError, Responses
from disagg.api.ids import R409_AMBIGUOUS, resolve
from disagg.api.paging import DEFAULT_LIMIT, Cursor, Limit, decode_cursor, next_link
from disagg.api.ratelimit import TenantBuckets, retry_after
from disagg.control.jobs import JobRejected, JobService, QueueFull
from disagg.store import IdempotencyConflict, JobLive, Principal
from disagg.store.operator import NotInState
from disagg.store.ports import ApiPort

router = APIRouter()

JobId = Annotated[str, Path(min_length=1, max_length=64,
                            description="A job id, e.g. j-0123456789ab, or any unique beginning of it (j-0123).")]
R422_NEVER_FITS: Responses = {422: {
    "model": S.ErrorOut,
    "description": "Bad input: the fields at fault and what is allowed; or a job that can never fit on this "
                   "cluster, even empty, or above what its tenant may ever hold (`problems[0].field` is `tasks`, "
                   "the message says what it lacks, or the tenant, the resource, the limit and the ask).",
    "content": {"application/json": {"examples": {"never-fits": {"summary": "A job larger than the cluster", "value": {
        "detail": "the job can never fit on this cluster: needs 9 gpu in all; the cluster has 5",
        "problems": [{"field": "tasks", "message": "the job can never fit on this cluster: needs 9 gpu in all; "
                                                   "the cluster has 5"}]}}}}},
}}
#: Stateful testing and clients: the id a POST returns is the `job_id` of the job's other routes.
#: (FastAPI names each operation `<function>_<path>_<method>`; a test checks these ids exist.)
_JOB_LINKS = {name: {"operationId": op, "parameters": {"job_id": "$response.body#/id"}}
              for name, op in (("GetJob", "get_job_v1_jobs__job_id__get"),
                               ("CancelJob", "cancel_job_v1_jobs__job_id__cancel_post"),
                               ("DeleteJob", "delete_job_v1_jobs__job_id__delete"),
                               ("JobLogs", "job_logs_v1_jobs__job_id__logs_get"),
                               ("JobEvents", "job_events_v1_jobs__job_id__events_get"),
                               ("HoldJob", "hold_job_v1_jobs__job_id__hold_post"),
                               ("ReleaseJob", "release_job_v1_jobs__job_id__release_post"),
                               ("RequeueJob", "requeue_job_v1_jobs__job_id__requeue_post"))}
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=256,
        pattern=r"^[\x21-\x7e]+$",
        description="Repeat a POST safely: the same key and body return the first job.",
    ),
]


def resolve_job(store: ApiPort, job_id: str, who: Principal) -> str:
    """The whole id of the one job of `who` that `job_id` is or begins; 404 for none (another tenant's
    job too), 409 naming the matches when several share the beginning (`disagg.api.ids`)."""
    return resolve(store, "job", job_id, who)


def _job(store: ApiPort, job_id: str, who: Principal) -> dict[str, Any]:
    """The job as `who` may see it, or 404 (for another tenant's job too)."""
    out = store.job_view(job_id, who)
    if out is None:
        raise ApiError(404, f"no job {job_id!r}")
    return out


@router.post(
    "/v1/jobs",
    status_code=201,
    response_model=S.JobOut,
    tags=["jobs"],
    responses={**R400, **R401, **R409, **R422_NEVER_FITS, **R429,
               201: {"description": "The job, stored and queued.", "links": _JOB_LINKS},
               503: {"model": S.ErrorOut, "description": "The store's disk is low (min_free_disk_mb): try later."}},
)
async def submit_job(request: Request, body: S.JobIn, who: Who, jobs: Jobs, idempotency_key: IdempotencyKey = None
                     ) -> dict[str, Any]:
    """Submit a job. It is queued and placed by the next scheduling round. 429 with `Retry-After` past the
    tenant's rate (`submit_rate_per_tenant`) or its queue bound (`max_queued_per_tenant`); 503 while the
    store's disk is low (`min_free_disk_mb`)."""
    t0 = time.perf_counter()
    _admit(request, who, jobs, 1)
    with _refusals():
        job, _created = await jobs.submit_async(who.tenant, body.model_dump(), idempotency_key)
    jobs.metrics.submit_seconds.observe(time.perf_counter() - t0)
    job["placement"] = None
    return job


@contextmanager
def _refusals() -> Iterator[None]:
    """A submission the service refuses, as the API answers it: 422 naming the field, 409 for an
    Idempotency-Key used with another body, 429 past the queue bound."""
    try:
        yield
    except JobRejected as exc:
        raise ApiError(422, str(exc), [{"field": exc.field, "message": str(exc)}]) from None
    except IdempotencyConflict as exc:
        raise ApiError(409, str(exc)) from None
    except QueueFull as exc:
        raise ApiError(429, str(exc)) from None


def _admit(request: Request, who: Principal, jobs: JobService, count: int) -> None:
    """Refuse a submission of `count` jobs before anything is stored: 503 while the store's disk is low,
    422 for a batch larger than the tenant's burst (it could never pass), 429 past the tenant's rate."""
    low = jobs.disk.trouble()
    if low:  # what is left of the store's disk is kept for cancels and the jobs that end
        raise ApiError(503, low)
    buckets: TenantBuckets = request.app.state.submit_buckets
    if not buckets.fits(count):
        why = (f"a batch of {count} jobs passes the {buckets.burst:g} a tenant may submit at once "
               "(rate_burst_per_tenant): send smaller batches")
        raise ApiError(422, why, [{"field": "jobs", "message": why}])
    wait = buckets.take(who.tenant, count=count)
    if wait:
        raise ApiError(429, f"tenant {who.tenant!r} submits faster than {jobs.config.submit_rate_per_tenant:g} jobs "
                       "a second (submit_rate_per_tenant): retry after Retry-After seconds",
                       headers={"Retry-After": retry_after(wait)})


@router.post(
    "/v1/job-batches",
    status_code=201,
    response_model=S.JobBatchOut,
    tags=["jobs"],
    responses={**R400, **R401, **R409, **R422_NEVER_FITS, **R429,
               201: {"description": "The jobs, stored and queued, in the order sent."},
               503: {"model": S.ErrorOut, "description": "The store's disk is low (min_free_disk_mb): try later."}},
)
async def submit_jobs(request: Request, body: S.JobBatchIn, who: Who, jobs: Jobs,
                      idempotency_key: IdempotencyKey = None) -> dict[str, Any]:
    """Submit up to 100 jobs in one request, stored together or not at all (as Slurm's job arrays): a
    client with many jobs pays one request, not one each. A job at fault answers 422 naming it
    (`jobs[2].tasks`) and nothing is stored; the batch counts as that many jobs against the tenant's rate
    and queue bound. An Idempotency-Key covers the whole batch."""
    t0 = time.perf_counter()
    _admit(request, who, jobs, len(body.jobs))
    with _refusals():
        out, _created = await jobs.submit_batch_async(who.tenant, [j.model_dump() for j in body.jobs],
                                                      idempotency_key)
    jobs.metrics.submit_seconds.observe(time.perf_counter() - t0)
    for job in out:
        job["placement"] = None
    return {"jobs": out}


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
    jobs, key = store.jobs_page(who, state, limit, decode_cursor(cursor, int, str))
    return {"jobs": jobs, "next": next_link(request, key)}


_ONE = {**R401, **R404, **R409_AMBIGUOUS, **R422}


@router.get("/v1/jobs/{job_id}", response_model=S.JobOut, tags=["jobs"], responses=_ONE)
def get_job(job_id: JobId, who: Who, store: StoreDep) -> dict[str, Any]:
    """A job: its state, its placement and slice, and why it waits."""
    return _job(store, resolve_job(store, job_id, who), who)


@router.post("/v1/jobs/{job_id}/cancel", status_code=202, response_model=S.JobOut, tags=["jobs"], responses=_ONE)
def cancel_job(
    job_id: JobId, who: Who, store: StoreDep, jobs: Jobs,
    grace_s: Annotated[float, Query(ge=0, le=S.MAX_CANCEL_GRACE_S, description=(
        "A running job gets `signal` first and this long to stop (its `trap` runs), then it is killed, as a "
        "preempted job is; 0 (the default): at once."))] = 0.0,
    signal: Annotated[S.CancelSignal, Query(description="The signal sent first when `grace_s` > 0.")] = "TERM",
) -> dict[str, Any]:
    """Cancel a job: a queued one stops waiting, a live slice is torn down (it happens after the answer,
    hence 202). With `grace_s`, a running job is signalled first and stays `running` until it stops or
    the grace period ends. Repeating it is harmless (a second cancel does not wait again), and so is
    cancelling a job that has ended: it stays as it is."""
    whole = resolve_job(store, job_id, who)
    job = _job(store, whole, who)
    jobs.cancel(whole, grace_s, signal, job["tenant"])
    return _job(store, whole, who)


@router.delete("/v1/jobs/{job_id}", status_code=204, tags=["jobs"], responses={
    **_ONE, 409: {"model": S.ErrorOut, "description": "The job has not ended (cancel it first), or the id prefix "
                                                        "matches several of your jobs."}})
def delete_job(job_id: JobId, who: Who, store: StoreDep, jobs: Jobs) -> Response:
    """Remove an ended job's record (the job, its slices' records and files, its history); afterwards it is
    404. A job still queued, composing or running answers 409: cancel it first (POST …/cancel); so does an
    ended job whose slice still tears down (a moment: it gives its devices back first)."""
    whole = resolve_job(store, job_id, who)
    try:
        if not jobs.delete(whole):
            raise ApiError(404, f"no job {job_id!r}")
    except JobLive as exc:
        raise ApiError(409, str(exc), [{"field": "job_id", "message": f"the job is {exc.state}"}]) from None
    return Response(status_code=204)


#: The most a page of logs holds, bytes (and what it holds by default).
MAX_LOG_PAGE = 2**20
DEFAULT_LOG_PAGE = 256 * 2**10
LogLimit = Annotated[int, Query(ge=1, le=MAX_LOG_PAGE, description=f"Bytes, at most {MAX_LOG_PAGE}.")]


@router.get("/v1/jobs/{job_id}/logs", response_model=S.LogsOut, tags=["jobs"], responses=_ONE)
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
    return jobs.log_page(resolve_job(store, job_id, who), offset, limit)


@router.get("/v1/jobs/{job_id}/events", response_model=S.EventList, response_model_by_alias=True, tags=["jobs"],
            responses=_ONE)
def job_events(job_id: JobId, request: Request, who: Who, store: StoreDep, limit: Limit = DEFAULT_LIMIT,
               cursor: Cursor = None) -> dict[str, Any]:
    """The job's history, oldest first: each transition of the job and of its slices, with why
    (e.g. "re-queued: device iobox0/gpu4 failed"), a page at a time (`next`)."""
    whole = resolve_job(store, job_id, who)
    key = decode_cursor(cursor, int)
    events = store.job_events(whole, int(key[0]) if key else None, limit + 1)
    more = len(events) > limit
    events = events[:limit]
    return {"job": whole, "events": events, "next": next_link(request, [events[-1]["id"]] if more else None)}


# --- an admin's actions on a job (after the others: clients' operation order stays) ----------------
def _admin_action(action: str, job_id: str, who: Principal, store: ApiPort, jobs: JobService) -> dict[str, Any]:
    whole = resolve_job(store, job_id, who)
    try:
        jobs.hold(whole, who.tenant, action)
    except NotInState as exc:
        raise ApiError(409, str(exc), [{"field": "job_id", "message": f"the job is {exc.state}"}]) from None
    return _job(store, whole, who)


_ADMIN_ONE: Responses = {**R401, **R403, **R404, **R422, 409: {
    "model": S.ErrorOut, "description": "The job is in no state the action applies to (the message says which "
                                        "it is in), or the id prefix matches several jobs."}}


@router.post("/v1/jobs/{job_id}/hold", response_model=S.JobOut, tags=["jobs"], responses=_ADMIN_ONE)
def hold_job(job_id: JobId, who: Admin, store: StoreDep, jobs: Jobs) -> dict[str, Any]:
    """Admin: keep a queued job out of placement (`held`) until released; 409 for a job in another state."""
    return _admin_action("hold", job_id, who, store, jobs)


@router.post("/v1/jobs/{job_id}/release", response_model=S.JobOut, tags=["jobs"], responses=_ADMIN_ONE)
def release_job(job_id: JobId, who: Admin, store: StoreDep, jobs: Jobs) -> dict[str, Any]:
    """Admin: put a held job back in the queue; 409 for a job that is not held."""
    return _admin_action("release", job_id, who, store, jobs)


@router.post("/v1/jobs/{job_id}/requeue", status_code=202, response_model=S.JobOut, tags=["jobs"],
             responses=_ADMIN_ONE)
def requeue_job(job_id: JobId, who: Admin, store: StoreDep, jobs: Jobs) -> dict[str, Any]:
    """Admin: stop a composing or running job and queue it again (its slice is torn down after the answer,
    hence 202; its retries are kept); a queued job stays as it is; 409 for one that has ended or is held."""
    return _admin_action("requeue", job_id, who, store, jobs)
