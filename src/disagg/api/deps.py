"""What the routes depend on: who is asking (a bearer token → `Principal`), the store, and the jobs side
of the controller. Each is a FastAPI dependency, so a route names what it needs in its signature.

`create_app` puts the controller, its store and the token cache on `app.state`; these read them from
there. They are `async`: run on the event loop, they cost no hop to a worker thread.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from disagg.api.errors import ApiError
from disagg.control.jobs import JobService
from disagg.store import Principal, Store

_bearer = HTTPBearer(auto_error=False, description="A token from `disagg token create`.")


async def get_store(request: Request) -> Store:
    """The store the read views query."""
    store: Store = request.app.state.store
    return store


async def get_jobs(request: Request) -> JobService:
    """The one way the routes reach the controller: submit, cancel, logs, device and link actions,
    the last round, metrics and the config."""
    jobs: JobService = request.app.state.jobs
    return jobs


async def principal(
    request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """Who the bearer token belongs to; 401 without one or with an unknown one.

    A known token costs no query (the app's cache of the tokens it has seen); an unknown one is
    looked up once, on a worker thread.
    """
    if creds is None or not creds.credentials:
        raise ApiError(401, "missing bearer token (Authorization: Bearer <token>)")
    who = await lookup_token(request, creds.credentials)
    if who is None:
        raise ApiError(401, "unknown token")
    return who


async def lookup_token(request: Request, token: str) -> Principal | None:
    """Who `token` belongs to (None: nobody), through the app's cache of the tokens it has seen. The
    bearer header and the dashboard's session cookie both end here."""
    tokens: dict[str, Principal] = request.app.state.tokens
    who = tokens.get(token)
    if who is None:
        store: Store = request.app.state.store
        who = await run_in_threadpool(store.principal, token)
        if who is None:
            return None
        tokens[token] = who
    return who


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
StoreDep = Annotated[Store, Depends(get_store)]
#: The controller's jobs side.
Jobs = Annotated[JobService, Depends(get_jobs)]

__all__ = ["Admin", "Jobs", "StoreDep", "Who", "admin", "get_jobs", "get_store", "lookup_token", "no_unknown_query",
           "principal"]
