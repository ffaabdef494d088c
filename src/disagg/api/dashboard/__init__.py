"""The dashboard: server-rendered pages (Jinja2 templates in `templates/`) with small progressive
updates, every asset served by disagg itself (`static/`: our own CSS and a few lines of script; charts
are SVG drawn on the server). Sign in with a token; a tenant sees its own jobs, an admin all.

Pages: `/ui/queue` (waiting jobs with the policy's reason, live and recent jobs), `/ui/jobs/{id}`
(placement, step timeline, history, log tail, cancel), `/ui/fabric` (racks, nodes, devices by
state, link load, failures), `/ui/history` (the numbers over time), an admin's actions with a
confirmation page each (`actions.py`). `/` leads to the queue. An error
of a page (an unknown job, a cross-site form, a bad filter) is a page too (`errors.error_page`).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from disagg.api.dashboard import actions, auth, fabric, history, job, queue
from disagg.api.dashboard.csp import SameOriginOnly
from disagg.api.dashboard.errors import error_page
from disagg.api.sessions import SessionTable

#: The dashboard's routers, in the order the app includes them.
ROUTERS = (auth.router, queue.router, job.router, fabric.router, history.router, actions.router)
STATIC = Path(__file__).with_name("static")


def install(app: FastAPI) -> None:
    """Add the dashboard's pages and its static files to `app`; a page asked for without a session
    sends the browser to /login; every answer says the browser may load from this origin only."""
    app.state.dashboard_sessions = SessionTable()  # the signed-in browsers (`auth`)
    for router in ROUTERS:
        app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="dashboard-static")
    app.add_exception_handler(auth.SignInRequired, auth.sign_in_redirect)
    app.add_middleware(SameOriginOnly)


__all__ = ["ROUTERS", "error_page", "install"]
