"""Errors of the dashboard's pages as pages: a browser that asks for an unknown job, posts a form from
another site or sends a bad filter gets the dashboard's layout with the message and a link back,
never the API's JSON. The status and the message are the API's own (`disagg.api.errors` makes them
and calls `error_page`); a request outside the dashboard (`/v1/…`, `/redfish/…`, `/healthz`) keeps
its JSON.
"""

from __future__ import annotations

import json

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from disagg.api.dashboard.auth import signed_in
from disagg.api.dashboard.render import ENV, leader

#: What a browser's page of the dashboard is: `/`, signing in and out, and everything under /ui.
_PAGES = ("/", "/login", "/logout", "/ui")

#: The page's title by status (others: "Error <status>").
_TITLES = {400: "Bad request", 403: "Not allowed", 404: "Not found", 405: "Not allowed here", 409: "Ambiguous",
           422: "Bad input"}


def is_page(path: str) -> bool:
    """True for a path of the dashboard (where a browser reads the answer), not of the API."""
    return path in _PAGES or path.startswith("/ui/")


async def error_page(request: Request, answer: JSONResponse) -> Response | None:
    """The API's error `answer` (its status; `detail`, `problems`) as the dashboard's error page, or None
    outside the dashboard (read only then). Signed in, the page has the usual header and leads back to
    the queue; else to sign-in."""
    if not is_page(request.url.path):
        return None
    status, body = answer.status_code, json.loads(bytes(answer.body))
    who = await signed_in(request)
    back, label = ("/ui/queue", "Back to the queue") if who else ("/login", "Sign in")
    problems = body.get("problems") or []  # one says what the message says; several (the matches) add to it
    html = ENV.get_template("error.html").render(
        title=_TITLES.get(status, f"Error {status}"), who=who, path=request.url.path, detail=body.get("detail", ""),
        problems=problems if len(problems) > 1 else [], back=back, back_label=label,
        leads=leader(request) if who else None)
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


__all__ = ["error_page", "is_page"]
