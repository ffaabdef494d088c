"""The "over time" page: devices in use by kind, queue length, link load, rounds per minute and round
time, from the samples the controller takes (`GET /v1/history` reads the same), drawn as SVG on the
server (`charts.py`)."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from disagg.api.dashboard.auth import Viewer
from disagg.api.dashboard.charts import line_chart
from disagg.api.dashboard.render import page
from disagg.api.dashboard.timeline import buckets, fitting_window, marks
from disagg.api.deps import Jobs, StoreDep
from disagg.api.routers.history import DEFAULT_BUCKETS
from disagg.model.states import JobState

router = APIRouter(include_in_schema=False)

#: The windows the page offers, seconds.
WINDOWS = {"15m": 900, "1h": 3600, "6h": 21600, "24h": 86400}
#: The busiest links drawn (by their highest load in the window).
TOP_LINKS = 5


def chart_series(points: list[dict[str, Any]]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """The page's charts from history points: chart → series name → [(time, value)]."""
    def scalar(key: str, scale: float = 1.0) -> list[tuple[float, float]]:
        return [(p["at"], p[key] * scale) for p in points if p.get(key) is not None]

    def mapped(key: str, names: list[str]) -> dict[str, list[tuple[float, float]]]:
        return {n: [(p["at"], p[key].get(n, 0.0)) for p in points] for n in names}

    kinds = sorted({k for p in points for k in p["devices_total"]})
    totals = {f"{n} in all": [(p["at"], p["devices_total"].get(n, 0)) for p in points] for n in kinds}
    peak: dict[str, float] = {}
    for p in points:
        for link, gbps in p["link_load_gbps"].items():
            peak[link] = max(peak.get(link, 0.0), gbps)
    busiest = sorted(peak, key=lambda k: -peak[k])[:TOP_LINKS]
    return {
        "devices": {**mapped("devices_in_use", kinds), **totals},
        "queue": {JobState.QUEUED: scalar("queue_length"), JobState.RUNNING: scalar("jobs_running")},
        "links": mapped("link_load_gbps", busiest) or {"busiest link (% of bandwidth)":
                                                       scalar("link_utilisation_max", 100.0)},
        "rounds": {"rounds per minute": scalar("rounds_per_min")},
        "round_time": {"mean round time": scalar("round_s", 1000.0)},
    }


CHARTS = (("devices", "Devices in use (and in all, dashed), by kind", "devices"),
          ("queue", "Jobs waiting and running", "jobs"),
          ("links", f"Link load, the {TOP_LINKS} busiest links", "Gbit/s"),
          ("rounds", "Placement rounds per minute", "rounds/min"), ("round_time", "Placement round time", "ms"))


#: The charts that show faults and repairs as vertical marks.
MARKED = ("devices", "queue")


@router.get("/ui/history", response_class=HTMLResponse)
def history_page(request: Request, who: Viewer, store: StoreDep, jobs: Jobs,
                 window: Annotated[Literal["15m", "1h", "6h", "24h"] | None, Query()] = None,
                 partial: Annotated[bool, Query()] = False) -> HTMLResponse:
    """The charts over `window` (by default the smallest that holds every sample kept): counts by their
    largest value per bucket, capacity lines, and marks where faults and repairs happened."""
    end = time.time()
    span = store.history_span()
    shown = window or fitting_window(WINDOWS, span[0] if span else None, end)
    start = end - WINDOWS[shown]
    step = max(jobs.config.history_every_s, (end - start) / DEFAULT_BUCKETS)
    samples = store.history_samples(start, end)
    series = chart_series(buckets(samples, start, step))
    found = marks(samples)
    # the default view fits the data: its axis starts at the first sample (a window asked for is shown whole)
    axis = (max(start, samples[0][0] - step) if window is None and samples else start, end)
    charts = [{"id": f"chart-{key}", "title": title, "points": sum(len(s) for s in series[key].values()),
               "svg": line_chart(f"chart-{key}", title, unit, series[key], axis,
                                 capacity=[n for n in series[key] if n.endswith(" in all")],
                                 marks=found if key in MARKED else (), counts=unit in ("devices", "jobs"))
               if any(series[key].values()) else None} for key, title, unit in CHARTS]
    return page(request, "history.html", who, partial, charts=charts, window=shown, windows=list(WINDOWS),
                every_s=jobs.config.history_every_s, samples=len(samples), marks=found, title="Over time")


__all__ = ["CHARTS", "WINDOWS", "chart_series", "history_page", "router"]
