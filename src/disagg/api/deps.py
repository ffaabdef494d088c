"""What the routes depend on: who is asking (a bearer token → `Principal`), the store, and the jobs side
of the controller. Each is a FastAPI dependency, so a route names what it needs in its signature.

`create_app` puts the controller, its store and the token cache (`TokenCache`: half a second) on
`app.state`; these read them from there. They are `async`: run on the event loop, they cost no hop to a worker thread.
"""

from __future__ import annotations

import base64
import time
from typing import Annotated

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from disagg.api.errors import ApiError
from disagg.control.jobs import JobService
from disagg.store import Principal
from disagg.store.ports import ApiPort

_bearer = HTTPBearer(auto_error=False, description="A token from `disagg token create`.")
#: How long this process trusts a token it has resolved (a revocation elsewhere takes effect within it).
TOKEN_TTL_S = 0.5


async def get_store(request: Request) -> ApiPort:
    """The store the read views query."""
    store: ApiPort = request.app.state.store
    return store


async def get_jobs(request: Request) -> JobService:
    """The one way the routes reach the controller: submit, cancel, logs, device and link actions,
    the last round, metrics and the config."""
    jobs: JobService = request.app.state.jobs
    return jobs


class TokenCache:
    """Tokens this process resolved in the last `ttl_s` seconds, so a burst of requests costs one look-up.

    Short on purpose: a token revoked or expired (in this process or another one sharing the store)
    stops working within `ttl_s`; a revocation through this process's API drops it at once.
    """

    def __init__(self, ttl_s: float = TOKEN_TTL_S, size: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self._seen: dict[str, tuple[float, Principal]] = {}

    def get(self, token: str, now: float) -> Principal | None:
        hit = self._seen.get(token)
        if hit is None or hit[0] <= now:
            return None
        return hit[1]

    def put(self, token: str, who: Principal, now: float) -> None:
        if len(self._seen) >= self.size:
            self._seen = {k: v for k, v in self._seen.items() if v[0] > now}
            if len(self._seen) >= self.size:
                self._seen.clear()
        until = now + self.ttl_s
        if who.expires_at is not None:  # an expiring token is never kept past its expiry
            until = min(until, who.expires_at - time.time() + now)
        self._seen[token] = (until, who)

    def clear(self) -> None:
        self._seen.clear()


async def principal(
    request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """Who the bearer token belongs to; 401 without one, or with an unknown, revoked or expired one.

    A token seen in the last TOKEN_TTL_S costs no query (`TokenCache`); otherwise it is looked up
    on a worker thread.
    """
    token = _credentials(request, creds)
    if token is None:
        raise ApiError(401, "missing bearer token (Authorization: Bearer <token>)")
    who = await lookup_token(request, token)
    if who is None:
        raise ApiError(401, "unknown, revoked or expired token")
    return who


async def lookup_token(request: Request, token: str) -> Principal | None:
    """Who `token` belongs to (None: nobody, or a revoked or expired token), through the app's short-lived
    cache (`TokenCache`). The bearer header and the dashboard's session cookie both end here."""
    cache: TokenCache = request.app.state.tokens
    now = time.monotonic()
    who = cache.get(token, now)
    if who is None:
        store: ApiPort = request.app.state.store
        who = await run_in_threadpool(store.principal, token)
        if who is None:
            return None
        cache.put(token, who, now)
    return who


def _credentials(request: Request, creds: HTTPAuthorizationCredentials | None) -> str | None:
    """The token: a bearer token, or for a browser at the dashboard the password of HTTP Basic auth."""
    if creds is not None and creds.credentials:
        return creds.credentials
    header = request.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip() or None
    if header[:6].lower() == "basic ":
        try:
            _user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return password or None
    return None


async def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    """The caller, if an admin; 403 otherwise."""
    if not who.admin:
        raise ApiError(403, "this needs an admin token")
    return who


def _query_names(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def no_unknown_query(request: Request) -> None:
    """Refuse query parameters a route does not declare (the schema says there are no others)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    allowed = _query_names(route.dependant)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise ApiError(
            422,
            f"unknown query parameter {unknown[0]!r}; allowed: {', '.join(sorted(allowed)) or 'none'}",
            [{"field": k, "message": "unknown query parameter"} for k in unknown],
        )


#: The caller (any valid token).
Who = Annotated[Principal, Depends(principal)]
#: The caller, who must be an admin.
Admin = Annotated[Principal, Depends(admin)]
#: The store, for the read views.
StoreDep = Annotated[ApiPort, Depends(get_store)]
#: The controller's jobs side.
Jobs = Annotated[JobService, Depends(get_jobs)]

__all__ = ["TOKEN_TTL_S", "Admin", "Jobs", "StoreDep", "TokenCache", "Who", "admin", "get_jobs", "get_store",
           "lookup_token", "no_unknown_query", "principal"]
