"""Signing in to the dashboard: a token (the same bearer tokens the API takes) opens a session.

The cookie holds the session's key, never the token: the session (`disagg.api.sessions`, in the API
process) stands for the token, which every page looks up again (a revoked or expired token ends it), and
`POST /logout` ends it on the server, so a copied cookie is worth nothing after sign-out. Logout, like
cancel, takes a form post from this site only (Origin). The cookie is HttpOnly (no script reads it),
SameSite=Strict (no other site's page can make the browser send it), Secure when the page came over
HTTPS, and lasts as long as the browser session. Every page asks `viewer`: no valid session sends the
browser to /login, and back to the page after signing in. A tenant sees its own jobs only; an admin
sees all.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from disagg.api.dashboard.render import ENV
from disagg.api.deps import lookup_token
from disagg.api.errors import ApiError
from disagg.api.sessions import SessionTable
from disagg.store import Principal

COOKIE = "disagg_session"
router = APIRouter(include_in_schema=False)


class SignInRequired(Exception):
    """A page was asked for without a valid session: the handler sends the browser to /login."""

    def __init__(self, back_to: str) -> None:
        super().__init__(back_to)
        self.back_to = back_to


def _sessions(request: Request) -> SessionTable:
    table: SessionTable = request.app.state.dashboard_sessions
    return table


async def signed_in(request: Request) -> Principal | None:
    """Who is looking (the session of the cookie, its token looked up again), or None without a valid one."""
    key = request.cookies.get(COOKIE)
    s = _sessions(request).by_key(key) if key else None
    if s is None:
        return None
    who = await lookup_token(request, s.token)
    if who is None:  # the token was revoked or expired: the session ends with it
        _sessions(request).close(s.id)
    return who


async def viewer(request: Request) -> Principal:
    """Who is looking (from the session cookie); SignInRequired without a valid one."""
    who = await signed_in(request)
    if who is None:
        raise SignInRequired(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    return who


def same_origin(request: Request) -> bool:
    """A form post from one of our own pages (a browser sends Origin with a POST; none: not a browser)."""
    origin = request.headers.get("origin")
    return origin is None or origin == f"{request.url.scheme}://{request.url.netloc}"


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this site only (never another host)."""
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/ui/queue"
    return target


def sign_in_redirect(_request: Request, exc: Exception) -> Response:
    back = exc.back_to if isinstance(exc, SignInRequired) else "/ui/queue"
    return RedirectResponse(f"/login?next={quote(back, safe='')}", status_code=303)


Viewer = Annotated[Principal, Depends(viewer)]
Next = Annotated[str | None, Query(alias="next", max_length=2000)]


@router.get("/login", response_class=HTMLResponse)
def login_form(next_: Next = None) -> HTMLResponse:
    return HTMLResponse(ENV.get_template("login.html").render(next=_safe_next(next_), error=None))


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the token; set the session cookie and go back to the page that asked, or show the form again."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    target = _safe_next((form.get("next") or [""])[0])
    who = await lookup_token(request, token) if token and same_origin(request) else None
    if who is None:
        page = ENV.get_template("login.html").render(next=target, error="That token is not valid.")
        return HTMLResponse(page, status_code=401)
    session = _sessions(request).open(who, token, who.tenant)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, session.key, httponly=True, samesite="strict", secure=request.url.scheme == "https",
                        path="/")
    return response


@router.post("/logout")
def logout(request: Request) -> Response:
    """End the session on the server (its cookie is then worth nothing) and drop the cookie; a form post
    from this site only."""
    if not same_origin(request):
        raise ApiError(403, "cross-site form post refused")
    key = request.cookies.get(COOKIE)
    s = _sessions(request).by_key(key) if key else None
    if s is not None:
        _sessions(request).close(s.id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/")
def home(_who: Viewer) -> Response:
    return RedirectResponse("/ui/queue", status_code=303)


__all__ = ["COOKIE", "SignInRequired", "Viewer", "router", "same_origin", "sign_in_redirect", "viewer"]
