"""/v1/history: the controller's numbers over time (queue, devices in use by kind, link load, rounds),
as the loop samples them every `history_every_s`, averaged over buckets of `step` seconds."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query

from disagg.api import schemas as S
from disagg.api.deps import Jobs, StoreDep, Who
from disagg.api.errors import R401, R422
from disagg.store.history import MAX_POINTS

router = APIRouter()

#: Without `from`, the last hour.
DEFAULT_SPAN_S = 3600.0
#: Without `step`, the span in this many buckets (or the sampling period, if longer).
DEFAULT_BUCKETS = 120

Seconds = Annotated[float | None, Query(ge=0, le=1e11, allow_inf_nan=False)]


def history_window(start: float | None, end: float | None, step: float | None, every_s: float,
                   now: float) -> tuple[float, float, float]:
    """(from, to, step) with the defaults filled in. A step that would make more than MAX_POINTS buckets
    is widened to make MAX_POINTS (the answer says the step it used); `from` at or after `to` is an
    empty window."""
    end = now if end is None else end
    start = end - DEFAULT_SPAN_S if start is None else start
    span = max(end - start, 0.0)
    step = max(every_s, span / DEFAULT_BUCKETS) if step is None else step
    if span / step > MAX_POINTS:  # a float: a tiny step makes inf, never an error
        step = span / MAX_POINTS
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
    averaged per bucket, oldest first; a bucket without samples is left out. At most 2,000 buckets: a
    smaller step is widened (`step` in the answer is the one used)."""
    start, end, step = history_window(start, end, step, jobs.config.history_every_s, time.time())
    return {"from": start, "to": end, "step": step, "every_s": jobs.config.history_every_s,
            "points": store.history(start, end, step)}
