"""The REST API (FastAPI): jobs, slices, machines, devices, links, history, health, metrics, the dashboard
at `/` and the API's documentation (Swagger UI at /docs, ReDoc at /redoc) — every asset served from here,
none from a CDN (an air-gapped data center reaches none); and, unless `redfish: false`, the Redfish
service at `/redfish/v1` (`disagg.api.redfish`).

`create_app` only assembles: the routers (one module per resource, `disagg.api.routers`), the
dependencies they share (`disagg.api.deps`: auth, the store, the controller) and the error handlers
(`disagg.api.errors`). Auth is a bearer token per tenant (or admin). Bad input answers 422 with every
field at fault and what is allowed; nothing is written then. See README.md for the pipeline.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI
from fastapi_offline import FastAPIOffline

from disagg.api import dashboard
from disagg.api.deps import TokenCache, no_unknown_query
from disagg.api.errors import install_handlers
from disagg.api.ratelimit import TenantBuckets
from disagg.api.routers import ROUTERS
from disagg.control.jobs import JobService


def create_app(jobs: JobService) -> FastAPI:
    """The API of one controller, over its JobService. The caller runs the scheduling loop (see `disagg serve`)."""
    # FastAPIOffline: FastAPI whose /docs and /redoc load Swagger UI and ReDoc from the package's own
    # copies (served under /static-offline-docs), not from a CDN; no validator badge (it calls out).
    app: FastAPI = FastAPIOffline(
        dependencies=[Depends(no_unknown_query)],
        swagger_ui_parameters={"validatorUrl": None},
        title="disagg",
        version="0.1.0",
        description="The disagg controller: jobs, slices, machines and devices of a disaggregated data center.",
    )
    app.state.jobs = jobs  # what `deps.get_jobs` hands the routes
    app.state.store = jobs.store
    app.state.tokens = TokenCache()  # the tokens resolved in the last half second (see `deps.principal`)
    # each tenant's submissions, at `submit_rate_per_tenant` a second (`ratelimit`)
    app.state.submit_buckets = TenantBuckets(jobs.config.submit_rate_per_tenant, jobs.config.rate_burst_per_tenant)
    for router in ROUTERS:
        app.include_router(router)
    dashboard.install(app)
    install_handlers(app, [route for router in (*ROUTERS, *dashboard.ROUTERS) for route in router.routes],
                     dashboard.error_page)
    if jobs.config.redfish:  # the inventory as a DMTF Redfish CompositionService, at /redfish/v1
        from disagg.api.redfish import mount_redfish

        mount_redfish(app, jobs)
    return app
