"""An admin's actions where the operator looks: drain, fail or repair a device; fail or repair a link; hold,
release or requeue a job. Each asks first: the page's button leads to a confirmation page
(`GET /ui/confirm/{kind}/{action}/{id}`: what will happen, a button to do it, a way back), whose form posts
to `/ui/act/...` — from this site only (the Origin check of the job page's cancel; the session cookie is
SameSite=Strict besides), then back to the page the operator came from. The actions are the API's own
(`JobService.set_device`, `set_link`, `hold`), so each leaves the same event and log line.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from disagg.api.dashboard.auth import Viewer, same_origin
from disagg.api.dashboard.render import page
from disagg.api.deps import Jobs, StoreDep
from disagg.api.errors import ApiError
from disagg.api.ids import resolve
from disagg.api.routers.jobs import resolve_job
from disagg.store import Principal
from disagg.store.operator import NotInState
from disagg.store.ports import ApiPort

router = APIRouter(include_in_schema=False)

#: What each action does, as the confirmation page says it (kind → action → sentence).
ACTIONS: dict[str, dict[str, str]] = {
    "device": {"drain": "keep it out of new slices (a slice holding it keeps it)",
               "fail": "mark it failed (fault injection): the slices using it are torn down, their jobs re-queued",
               "repair": "mark it working and not drained: it rejoins the pool"},
    "link": {"fail": "drop it (fault injection): slices whose remote devices cross it are torn down, their jobs "
                     "re-queued; the devices behind it leave the pool",
             "repair": "bring it back: the devices behind it rejoin the pool"},
    "job": {"hold": "keep it out of placement until released",
            "release": "put it back in the queue",
            "requeue": "stop it (its slice is torn down) and queue it again, its retries kept"},
}
Kind = Annotated[str, Path(pattern="^(device|link|job)$")]
Action = Annotated[str, Path(pattern="^(drain|fail|repair|hold|release|requeue)$")]
Ident = Annotated[str, Path(min_length=1, max_length=160)]


def _target(store: ApiPort, kind: str, action: str, ident: str, who: Principal) -> str:
    """The whole id of what the action is on; 403 for a non-admin, 404 for an action the kind has not."""
    if not who.admin:
        raise ApiError(403, "this needs an admin's session")
    if action not in ACTIONS[kind]:
        raise ApiError(404, f"a {kind} has no action {action!r} (it has: {', '.join(ACTIONS[kind])})")
    if kind == "job":
        return resolve_job(store, ident, who)
    return resolve(store, "device" if kind == "device" else "link", ident, who)


def _back(kind: str, whole: str) -> str:
    return f"/ui/jobs/{whole}" if kind == "job" else "/ui/fabric"


@router.get("/ui/confirm/{kind}/{action}/{ident:path}", response_class=HTMLResponse)
def confirm(request: Request, kind: Kind, action: Action, ident: Ident, who: Viewer, store: StoreDep) -> HTMLResponse:
    """The confirmation page: what the action will do, a button to do it, a link back."""
    whole = _target(store, kind, action, ident, who)
    return page(request, "confirm.html", who, False, kind=kind, action=action, target=whole,
                what=ACTIONS[kind][action], back=_back(kind, whole), title=f"{action.capitalize()} {kind} {whole}?")


@router.post("/ui/act/{kind}/{action}/{ident:path}")
def act(request: Request, kind: Kind, action: Action, ident: Ident, who: Viewer, store: StoreDep,
        jobs: Jobs) -> Response:
    """Do the confirmed action (a form post from this site only), then back to where the operator was."""
    if not same_origin(request):
        raise ApiError(403, "cross-site form post refused")
    whole = _target(store, kind, action, ident, who)
    if kind == "device":
        jobs.set_device(whole, action)
    elif kind == "link":
        jobs.set_link(whole, action)
    else:
        try:
            jobs.hold(whole, who.tenant, action)
        except NotInState as exc:
            raise ApiError(409, str(exc)) from None
    return RedirectResponse(_back(kind, whole), status_code=303)


__all__ = ["ACTIONS", "router"]
