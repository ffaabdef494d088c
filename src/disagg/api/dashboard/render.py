"""Rendering the dashboard's pages: one Jinja2 environment over the package's templates, the filters
the templates share (times, durations, bandwidth), and `page()`, which answers a whole page or, for a
progressive update (`?partial=1`), only its live part.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from disagg.display import clock, duration, number
from disagg.store import Principal

#: How often the live part of a page is fetched again, seconds (the log tail: LOG_REFRESH_S).
REFRESH_S = 5
LOG_REFRESH_S = 2


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
    ctx = {"request": request, "who": who, "now": time.time(), "refresh_s": REFRESH_S, "leads": leader(request),
           "log_refresh_s": LOG_REFRESH_S, "path": request.url.path, "query": str(request.url.query), **context}
    body = "".join(tpl.blocks["live"](tpl.new_context(ctx))) if partial else tpl.render(ctx)
    return HTMLResponse(body, headers={"Cache-Control": "no-store"})


def leader(request: Request) -> dict[str, Any] | None:
    """For the header: which replica leads, since when, and which one answers (None: no lease row)."""
    from disagg.control.leadership import controller_view
    from disagg.control.service import this_replica

    state = request.app.state
    if not hasattr(state, "store") or not hasattr(state, "jobs"):
        return None
    try:
        view = controller_view(state.store, this_replica(state.jobs.config))
    except Exception:  # the header never breaks a page
        return None
    return view


__all__ = ["ENV", "LOG_REFRESH_S", "REFRESH_S", "clock", "duration", "leader", "number", "page"]
