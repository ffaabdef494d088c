"""Rendering the dashboard's pages: one Jinja2 environment over the package's templates, the filters
the templates share (times, durations, bandwidth), and `page()`, which answers a whole page or, for a
progressive update (`?partial=1`), only its live part.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from disagg.store import Principal

#: How often the live part of a page is fetched again, seconds (the log tail: LOG_REFRESH_S).
REFRESH_S = 5
LOG_REFRESH_S = 2


def duration(seconds: float | None) -> str:
    """A duration for people: 0.42 s, 12 s, 3 min 05 s, 2 h 10 min, 3 d 4 h."""
    if seconds is None:
        return ""
    s = max(0.0, float(seconds))
    if s < 10:
        return f"{s:.2f} s" if s < 1 else f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    if s < 86400:
        return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"
    return f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"


def clock(at: float | None) -> str:
    """A moment as the server's UTC time of day (with the date when it is not today)."""
    if at is None:
        return ""
    moment = datetime.fromtimestamp(at, UTC)
    today = datetime.now(UTC).date()
    return moment.strftime("%H:%M:%S" if moment.date() == today else "%Y-%m-%d %H:%M:%S") + " UTC"


def number(value: float | None, digits: int = 3) -> str:
    """A number without needless digits (12, 0.5, 1.25)."""
    return "" if value is None else f"{value:.{digits}g}"


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("disagg.api.dashboard", "templates"),
                      autoescape=select_autoescape(["html"]), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(duration=duration, clock=clock, number=number)
    return env


ENV = _environment()


def page(request: Request, template: str, who: Principal, partial: bool, **context: Any) -> HTMLResponse:
    """The page `template` for `who`; with `partial`, only its `live` block (what the page's script
    swaps in every REFRESH_S seconds)."""
    tpl = ENV.get_template(template)
    ctx = {"request": request, "who": who, "now": time.time(), "refresh_s": REFRESH_S,
           "log_refresh_s": LOG_REFRESH_S, "path": request.url.path, "query": str(request.url.query), **context}
    if partial:
        body = "".join(tpl.blocks["live"](tpl.new_context(ctx)))
    else:
        body = tpl.render(ctx)
    return HTMLResponse(body, headers={"Cache-Control": "no-store"})


__all__ = ["ENV", "LOG_REFRESH_S", "REFRESH_S", "clock", "duration", "number", "page"]
