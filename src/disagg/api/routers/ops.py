"""What operators and their tools read: /healthz (no token: probes) and /metrics (Prometheus; a token
unless `metrics_public: true`, for a scraper on loopback). The dashboard (`/`, `/ui/…`) is
`disagg.api.dashboard`, behind a sign-in."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from disagg.api import schemas as S
from disagg.api.deps import Jobs, StoreDep, Who, principal
from disagg.api.errors import R401, ApiError
from disagg.control.jobs import JobService
from disagg.control.leadership import controller_view
from disagg.control.service import this_replica
from disagg.store.ports import ApiPort

router = APIRouter()


@router.get("/healthz", response_model=S.HealthOut, tags=["ops"])
def healthz(store: StoreDep, jobs: Jobs) -> dict[str, Any]:
    """Liveness: the API answers and the store is reachable; `degraded`, with the cause, for a minute after
    a scheduling round failed (the loop goes on, setting aside the jobs it failed on), and while the
    store's filesystem has less than `min_free_disk_mb` free (submissions are then refused with 503)."""
    store.ping()
    info = jobs.round_info()
    trouble = info.get("trouble")
    last = {k: float(v) for k, v in info.items() if isinstance(v, int | float)}
    cause = str(trouble.get("cause")) if isinstance(trouble, dict) else None
    cause = jobs.disk.trouble() or cause
    return {"status": "degraded" if cause else "ok", "cause": cause, "policy": jobs.config.policy,
            "last_round": last, **_controller(store, jobs)}


def _controller(store: ApiPort, jobs: JobService) -> dict[str, Any]:
    return controller_view(store, this_replica(jobs.config))


@router.get("/v1/controller", response_model=S.ControllerOut, tags=["ops"], responses={**R401})
def controller(store: StoreDep, jobs: Jobs, _who: Who) -> dict[str, Any]:
    """The controller's replicas: which one answers (`replica`, its `role`: leader or standby), the lease
    (`epoch`, `lease_age_s`: seconds since the leader last renewed it, by the database's clock), and
    every replica the store knows (docs/controller.md, "Replicas")."""
    return _controller(store, jobs)


async def _authorized(request: Request) -> bool:
    """Whether the request carries a valid token (bearer, or HTTP Basic's password)."""
    try:
        await principal(request, None)
    except ApiError:
        return False
    return True


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, jobs: Jobs) -> Response:
    if not jobs.config.metrics_public and not await _authorized(request):
        return Response("a token is needed (or metrics_public: true)\n", status_code=401,
                        headers={"WWW-Authenticate": "Bearer"}, media_type="text/plain")
    body = await run_in_threadpool(jobs.metrics.render)  # it reads the store: off the event loop
    return Response(body, media_type="text/plain; version=0.0.4")
