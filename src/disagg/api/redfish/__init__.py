"""disagg's inventory as a DMTF Redfish CompositionService, at `/redfish/v1` (on by default; `redfish: false`
turns it off).

Machines and devices are ResourceBlocks in ResourceZones (one per rack and per pool); live slice
machines are composed ComputerSystems; `POST /redfish/v1/Systems` composes a slice with no job through
the same slice state machine, owned by the caller's tenant until `DELETE` decomposes it; unless
`redfish_updatable: false`, its owner adds and removes blocks (`#ComputerSystem.AddResourceBlock`,
`RemoveResourceBlock`, a PATCH of its blocks), each update a move `composed → composing → composed`. So a Redfish
tool, or another disagg (`fabric: {driver: redfish}`), can drive disagg's pools. A sub-application of
its own: Redfish's errors, headers and authentication differ from the REST API's (`protocol`, `auth`).

    resources.py  blocks, zones, chassis and their components (pure: inventory → payloads)
    systems.py    composed systems, the Systems collection's capabilities, composition requests, tasks
    services.py   service root, SessionService, AccountService (tenants; predefined roles), TaskService
    metadata.py   `$metadata` (the CSDL the payloads use) and the OData service document
    protocol.py   the answers' headers (OData-Version, ETag, Link, Allow), 412 / 501, error bodies
    auth.py       sessions (X-Auth-Token), Basic, bearer: a user is a tenant, its password a disagg token
    routes.py     the routes
"""

from __future__ import annotations

import uuid

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from disagg.api.deps import TokenCache
from disagg.api.errors import STORE_RETRY_AFTER_S, store_unavailable
from disagg.api.ratelimit import TenantBuckets
from disagg.api.redfish.auth import Sessions
from disagg.api.redfish.protocol import Protocol, RedfishError, RedfishResponse, error_response
from disagg.api.redfish.routes import router
from disagg.api.redfish.services import version_document
from disagg.control.jobs import JobService
from disagg.store import UNAVAILABLE

#: Redfish's base path (the version document) and the service root's.
ROOT = "/redfish"


def redfish_app(jobs: JobService, tokens: TokenCache | None = None) -> FastAPI:
    """The Redfish service over one controller's JobService, as a sub-application to mount at `/redfish`;
    `tokens`: the REST API's token cache (a revocation through it ends Redfish sessions at once)."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None, redirect_slashes=False)
    app.state.jobs = jobs
    app.state.store = jobs.store
    app.state.sessions = Sessions()
    app.state.tokens = tokens if tokens is not None else TokenCache()
    # each tenant's compositions and updates, at `compose_rate_per_tenant` a second (`disagg.api.ratelimit`)
    app.state.compose_buckets = TenantBuckets(jobs.config.compose_rate_per_tenant, jobs.config.rate_burst_per_tenant)
    # one UUID per store: a restarted controller is the same service
    app.state.service_uuid = uuid.uuid5(uuid.NAMESPACE_URL, "disagg:" + jobs.store.url)
    app.include_router(router)
    app.add_middleware(Protocol, routes=lambda: router.routes)

    async def redfish_error(_req: Request, exc: Exception) -> Response:
        assert isinstance(exc, RedfishError)
        return error_response(exc)

    async def http_error(_req: Request, exc: Exception) -> Response:
        status = int(getattr(exc, "status_code", 500))
        message_id = {404: "ResourceNotFound", 405: "OperationNotAllowed"}.get(status, "GeneralError")
        return error_response(RedfishError(status, message_id, str(getattr(exc, "detail", exc))))

    async def store_down(req: Request, exc: Exception) -> Response:  # as /v1 answers it (`api.errors`)
        wait = str(STORE_RETRY_AFTER_S)
        return error_response(RedfishError(503, "ServiceTemporarilyUnavailable", store_unavailable(req, exc), [wait],
                                           {"Retry-After": wait}))

    from starlette.exceptions import HTTPException as StarletteHTTPException

    app.add_exception_handler(RedfishError, redfish_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    for kind in UNAVAILABLE:
        app.add_exception_handler(kind, store_down)
    return app


def mount_redfish(app: FastAPI, jobs: JobService) -> None:
    """Serve Redfish from `app`: `/redfish` (the version document) and everything under it."""

    def version(_req: Request) -> Response:
        return RedfishResponse(version_document(), headers={"OData-Version": "4.0", "Allow": "GET, HEAD"})

    app.add_route(ROOT, version, methods=["GET", "HEAD"], include_in_schema=False)
    app.mount(ROOT, redfish_app(jobs, app.state.tokens))


__all__ = ["ROOT", "mount_redfish", "redfish_app"]
