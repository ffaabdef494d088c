"""A job's page: its placement (machines; devices local or remote, with their network path and each
link's load), its slices' steps as a timeline with durations, its history (every transition with why),
a live tail of its log, and a cancel button.

Any unique beginning of the id works (`/ui/jobs/j-b642`), as in the API; another tenant's job is 404.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from disagg.api.dashboard.auth import Viewer, same_origin
from disagg.api.dashboard.render import page
from disagg.api.deps import Jobs, StoreDep
from disagg.api.errors import ApiError
from disagg.api.routers.jobs import resolve_job
from disagg.model.states import LinkState
from disagg.store.ports import ApiPort

router = APIRouter(include_in_schema=False)

#: The log tail: the last this many characters, of at most LOG_TAIL_BYTES read from the end of the log (a
#: character is at most 4 bytes: the tail is whole unless the log's end is not UTF-8).
LOG_TAIL = 16_000
LOG_TAIL_BYTES = 4 * LOG_TAIL

JobPath = Annotated[str, Path(min_length=1, max_length=64)]


def timeline(slices: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Each slice's steps as bars on one time axis per slice: offset and width in % of the slice's span,
    the step's duration (a step still running lasts until `now`)."""
    out = []
    for sl in slices:
        steps = [st for st in sl.get("steps") or [] if st["started_at"] is not None]
        if not steps:
            out.append({**sl, "bars": [], "span": 0.0})
            continue
        t0 = min(st["started_at"] for st in steps)
        t1 = max(st["ended_at"] or now for st in steps)
        span = max(t1 - t0, 1e-6)
        bars = [{**st, "left": 100 * (st["started_at"] - t0) / span,
                 "width": max(0.5, 100 * ((st["ended_at"] or now) - st["started_at"]) / span),
                 "seconds": (st["ended_at"] or now) - st["started_at"], "ongoing": st["ended_at"] is None}
                for st in steps]
        out.append({**sl, "bars": bars, "span": span, "start": t0})
    return out


def placement_rows(job: dict[str, Any], store: ApiPort) -> list[dict[str, Any]]:
    """Each task's machine and devices; each remote device's path with every link's load and bandwidth."""
    links = {lk["id"]: lk for lk in store.links_view()} if job.get("placement") else {}
    rows = []
    for task in job.get("placement") or []:
        devices = [{**d, "links": [links.get(link, {"id": link, "gbps": 0, "load_gbps": 0, "utilisation": 0,
                                                   "state": LinkState.UP}) for link in d["path"]]}
                   for d in task["devices"]]
        rows.append({**task, "devices": devices})
    return rows


@router.get("/ui/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: JobPath, who: Viewer, store: StoreDep,
             partial: Annotated[bool, Query()] = False) -> HTMLResponse:
    whole = resolve_job(store, job_id, who)
    job = store.job_view(whole, who)
    if job is None:
        raise ApiError(404, f"no job {job_id!r}")
    now = time.time()
    return page(request, "job.html", who, partial, job=job, placement=placement_rows(job, store),
                slices=timeline(store.job_slices(whole), now), events=store.job_events(whole),
                title=f"Job {job['name']}")


@router.get("/ui/jobs/{job_id}/log", response_class=PlainTextResponse)
def job_log(job_id: JobPath, who: Viewer, store: StoreDep, jobs: Jobs) -> PlainTextResponse:
    """The last LOG_TAIL characters the job's latest attempt wrote (the page's live tail), from at most
    LOG_TAIL_BYTES at the end of its log: a 64 MiB log costs what a small one does."""
    text = jobs.log_tail(resolve_job(store, job_id, who), LOG_TAIL_BYTES)
    return PlainTextResponse(text[-LOG_TAIL:], headers={"Cache-Control": "no-store"})


@router.post("/ui/jobs/{job_id}/cancel")
def cancel(request: Request, job_id: JobPath, who: Viewer, store: StoreDep, jobs: Jobs) -> Response:
    """The page's cancel button (a form post from this site only), then back to the job's page."""
    if not same_origin(request):
        raise ApiError(403, "cross-site form post refused")
    whole = resolve_job(store, job_id, who)
    jobs.cancel(whole)
    return RedirectResponse(f"/ui/jobs/{whole}", status_code=303)


__all__ = ["LOG_TAIL", "LOG_TAIL_BYTES", "placement_rows", "router", "timeline"]
