"""What operators and their tools read without a token: /healthz and /metrics (Prometheus). The
dashboard (`/`, `/ui/…`) is `disagg.api.dashboard`, behind a sign-in."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from disagg.api import schemas as S
from disagg.api.deps import Jobs, StoreDep

router = APIRouter()


@router.get("/healthz", response_model=S.HealthOut, tags=["ops"])
def healthz(store: StoreDep, jobs: Jobs) -> dict[str, Any]:
    """Liveness: the API answers and the store is reachable."""
    store.ping()
    last = {k: float(v) for k, v in jobs.round_info().items() if isinstance(v, int | float)}
    return {"status": "ok", "policy": jobs.config.policy, "last_round": last}


@router.get("/metrics", include_in_schema=False)
def metrics(jobs: Jobs) -> Response:
    return Response(jobs.metrics.render(), media_type="text/plain; version=0.0.4")
