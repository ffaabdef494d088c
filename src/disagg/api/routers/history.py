"""/v1/history: the controller's numbers over time (queue, devices in use by kind, link load, rounds),
as the loop samples them every `history_every_s`, averaged over buckets of `step` seconds."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query

from disagg.api import schemas as S
from disagg.api.deps import Jobs, StoreDep, Who
from disagg.api.errors import R401, R422, ApiError
from disagg.store.history import MAX_POINTS, buckets_needed

router = APIRouter()

#: Without `from`, the last hour.
DEFAULT_SPAN_S = 3600.0
#: Without `step`, the span in this many buckets (or the sampling period, if longer).
DEFAULT_BUCKETS = 120

Seconds = Annotated[float | None, Query(ge=0, le=1e11, allow_inf_nan=False)]


def history_window(start: float | None, end: float | None, step: float | None, every_s: float,
                   now: float) -> tuple[float, float, float]:
    """(from, to, step) with the defaults filled in; ApiError 422 when they make no window or too many points."""
    end = now if end is None else end
    start = end - DEFAULT_SPAN_S if start is None else start
    if start >= end:
        raise ApiError(422, f"from ({start:g}) must be before to ({end:g})",
                       [{"field": "from", "message": "must be before to"}])
    step = max(every_s, (end - start) / DEFAULT_BUCKETS) if step is None else step
    if buckets_needed(start, end, step) > MAX_POINTS:
        raise ApiError(422, f"from, to and step make {buckets_needed(start, end, step)} points; at most "
                            f"{MAX_POINTS} (a larger step)", [{"field": "step", "message": "too small for the span"}])
    return start, end, step


@router.get("/v1/history", response_model=S.HistoryOut, tags=["ops"], responses={**R401, **R422})
def get_history(
    _who: Who,
    store: StoreDep,
    jobs: Jobs,
    start: Annotated[Seconds, Query(alias="from",
                                    description="Start, seconds since the epoch (default: to − 1 h).")] = None,
    end: Annotated[Seconds, Query(alias="to", description="End, seconds since the epoch (default: now).")] = None,
    step: Annotated[float | None, Query(gt=0, le=1e9, allow_inf_nan=False,
                                        description="Bucket width, seconds (default: the span in 120).")] = None,
) -> dict[str, Any]:
    """Queue length, jobs running, devices in use by kind, link load, rounds per minute and round time,
    averaged per bucket, oldest first; a bucket without samples is left out."""
    start, end, step = history_window(start, end, step, jobs.config.history_every_s, time.time())
    return {"from": start, "to": end, "step": step, "every_s": jobs.config.history_every_s,
            "points": store.history(start, end, step)}
