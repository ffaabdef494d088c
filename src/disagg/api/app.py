"""The REST API (FastAPI): jobs, slices, machines, devices, health, metrics, and the dashboard at `/`.

Auth is a bearer token per tenant (or admin). A tenant sees and touches only its own jobs: another
tenant's job answers 404, as an unknown one does. Bad input answers 422 with every field at fault
and what is allowed; nothing is written then. POST /v1/jobs honours an `Idempotency-Key` header:
the same key and body give back the first job; the same key with another body answers 409.
"""

import time
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Path, Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from disagg.api import schemas as S
from disagg.api.dashboard import render_dashboard
from disagg.control.jobs import JobRejected, JobService
from disagg.store import IdempotencyConflict, Principal, job_dict, slice_dict
from disagg.store.models import JobRow, SliceRow, StepRow

_bearer = HTTPBearer(auto_error=False, description="A token from `disagg token create`.")

R400: dict[int | str, dict[str, Any]] = {400: {"model": S.ErrorOut, "description": "The body is not JSON."}}
R401: dict[int | str, dict[str, Any]] = {401: {"model": S.ErrorOut, "description": "No token, or not a valid one."}}
R403: dict[int | str, dict[str, Any]] = {403: {"model": S.ErrorOut, "description": "Admin only."}}
R404: dict[int | str, dict[str, Any]] = {404: {"model": S.ErrorOut, "description": "No such object (or not yours)."}}
R409: dict[int | str, dict[str, Any]] = {
    409: {"model": S.ErrorOut, "description": "Idempotency key reused with another body."}
}
R422: dict[int | str, dict[str, Any]] = {
    422: {"model": S.ErrorOut, "description": "Bad input: the fields at fault and what is allowed."}
}


class ApiError(HTTPException):
    def __init__(self, status: int, detail: str, problems: list[dict[str, str]] | None = None) -> None:
        super().__init__(status, detail)
        self.problems = problems or []


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _query_names(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def _no_unknown_query(request: Request) -> None:
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


def create_app(controller: JobService) -> FastAPI:
    """The API of one controller. The caller runs the controller loop (see `disagg serve`)."""
    app = FastAPI(
        dependencies=[Depends(_no_unknown_query)],
        title="disagg",
        version="0.1.0",
        description="The disagg controller: jobs, slices, machines and devices of a disaggregated data center.",
    )
    store = controller.store
    tokens: dict[str, Principal] = {}

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for e in exc.errors():
            msg = str(e.get("msg", "invalid"))
            if e.get("type") == "extra_forbidden":
                msg = "unknown field"
            problems.append({"field": _field(e.get("loc", ())), "message": msg})
        detail = "; ".join(f"{p['field']}: {p['message']}" for p in problems[:5]) or "invalid request"
        return JSONResponse(status_code=422, content={"detail": detail, "problems": problems})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(req: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # name every method the path has, not only the first route's
            methods: set[str] = set()
            for route in app.router.routes:
                match, _ = route.matches({**req.scope, "method": "__none__"})
                if match == Match.PARTIAL and isinstance(route, APIRoute):
                    methods |= route.methods or set()
            headers["Allow"] = ", ".join(sorted(methods))
        return JSONResponse(
            status_code=exc.status_code, headers=headers, content={"detail": str(exc.detail), "problems": []}
        )

    @app.exception_handler(ApiError)
    async def _api_error(_req: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
        return JSONResponse(
            status_code=exc.status_code,
            headers=headers,
            content={"detail": exc.detail, "problems": exc.problems},
        )

    async def principal(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
        # async, so a known token costs no hop to a worker thread; an unknown one is looked up once
        if creds is None or not creds.credentials:
            raise ApiError(401, "missing bearer token (Authorization: Bearer <token>)")
        who = tokens.get(creds.credentials)
        if who is None:
            who = await run_in_threadpool(store.principal, creds.credentials)
            if who is None:
                raise ApiError(401, "unknown token")
            tokens[creds.credentials] = who
        return who

    async def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
        if not who.admin:
            raise ApiError(403, "this needs an admin token")
        return who

    Who = Annotated[Principal, Depends(principal)]
    Admin = Annotated[Principal, Depends(admin)]
    JobId = Annotated[str, Path(max_length=64, description="A job id, e.g. j-0123456789ab.")]

    def own_job(s: Any, job_id: str, who: Principal) -> JobRow:
        row = s.get(JobRow, job_id)
        if row is None or (not who.admin and row.tenant != who.tenant):
            raise ApiError(404, f"no job {job_id!r}")
        return row  # type: ignore[no-any-return]

    def job_out(s: Any, row: JobRow) -> dict[str, Any]:
        out = job_dict(row)
        out["placement"] = None
        if row.slice_id is not None:
            sl = s.get(SliceRow, row.slice_id)
            if sl is not None:
                out["placement"] = sl.placement.get("tasks", [])
        return out

    @app.post(
        "/v1/jobs",
        status_code=201,
        response_model=S.JobOut,
        tags=["jobs"],
        responses={**R400, **R401, **R409, **R422},
    )
    async def submit_job(
        body: S.JobIn,
        who: Who,
        idempotency_key: Annotated[
            str | None,
            Header(
                alias="Idempotency-Key",
                max_length=256,
                pattern=r"^[\x21-\x7e]+$",
                description="Repeat a POST safely: the same key and body return the first job.",
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Submit a job. It is queued and placed by the next scheduling round."""
        t0 = time.perf_counter()
        try:
            job, _created = await controller.submit_async(who.tenant, body.model_dump(), idempotency_key)
        except JobRejected as exc:
            raise ApiError(422, str(exc), [{"field": exc.field, "message": str(exc)}]) from None
        except IdempotencyConflict as exc:
            raise ApiError(409, str(exc)) from None
        controller.metrics.submit_seconds.observe(time.perf_counter() - t0)
        job["placement"] = None
        return job

    @app.get("/v1/jobs", response_model=S.JobList, tags=["jobs"], responses={**R401, **R422})
    def list_jobs(
        who: Who, state: S.JobState | None = None, limit: Annotated[int, Query(ge=1, le=10_000)] = 1000
    ) -> dict[str, Any]:
        """Jobs of the caller's tenant (all jobs for an admin), newest first."""
        with store.read() as s:
            q = select(JobRow)
            if not who.admin:
                q = q.where(JobRow.tenant == who.tenant)
            if state is not None:
                q = q.where(JobRow.state == state)
            rows = list(s.scalars(q.order_by(JobRow.seq.desc()).limit(limit)))
            return {"jobs": [job_out(s, r) for r in rows]}

    @app.get("/v1/jobs/{job_id}", response_model=S.JobOut, tags=["jobs"], responses={**R401, **R404, **R422})
    def get_job(job_id: JobId, who: Who) -> dict[str, Any]:
        """A job: its state, its placement and slice, and why it waits."""
        with store.read() as s:
            return job_out(s, own_job(s, job_id, who))

    @app.delete("/v1/jobs/{job_id}", response_model=S.JobOut, tags=["jobs"], responses={**R401, **R404, **R422})
    def cancel_job(job_id: JobId, who: Who) -> dict[str, Any]:
        """Cancel a job; its slice, if any, is torn down. Repeating it is harmless."""
        with store.read() as s:
            own_job(s, job_id, who)
        controller.cancel(job_id)
        with store.read() as s:
            return job_out(s, own_job(s, job_id, who))

    @app.get("/v1/jobs/{job_id}/logs", response_model=S.LogsOut, tags=["jobs"], responses={**R401, **R404, **R422})
    def job_logs(job_id: JobId, who: Who) -> dict[str, Any]:
        """What the job's tasks wrote (stdout, then stderr), for its latest attempt."""
        with store.read() as s:
            own_job(s, job_id, who)
        return {"job": job_id, "logs": controller.logs(job_id)}

    @app.get("/v1/slices", response_model=S.SliceList, tags=["slices"], responses={**R401, **R422})
    def list_slices(
        who: Who,
        state: S.SliceState | None = None,
        steps: bool = False,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> dict[str, Any]:
        """Slices (of the caller's jobs; all for an admin), newest first; `steps` adds their step records."""
        with store.read() as s:
            q = select(SliceRow)
            if not who.admin:
                q = q.join(JobRow, JobRow.id == SliceRow.job_id).where(JobRow.tenant == who.tenant)
            if state is not None:
                q = q.where(SliceRow.state == state)
            rows = list(s.scalars(q.order_by(SliceRow.created_at.desc()).limit(limit)))
            out = []
            for r in rows:
                st = (
                    list(s.scalars(select(StepRow).where(StepRow.slice_id == r.id).order_by(StepRow.id)))
                    if steps
                    else None
                )
                out.append(slice_dict(r, st))
            return {"slices": out}

    @app.get("/v1/machines", response_model=S.MachineList, tags=["inventory"], responses={**R401})
    def list_machines(_who: Who) -> dict[str, Any]:
        """Machines and pools, with the slices that use them."""
        return {"machines": store.machines_view()}

    @app.get("/v1/devices", response_model=S.DeviceList, tags=["inventory"], responses={**R401})
    def list_devices(_who: Who) -> dict[str, Any]:
        """Devices: free, attached (with the slice), failed or drained."""
        return {"devices": store.devices_view()}

    DeviceId = Annotated[str, Path(max_length=160, description="A device id, e.g. iobox0/gpu0.")]

    def device_action(device_id: str, action: str) -> dict[str, Any]:
        out = controller.set_device(device_id, action)
        if out is None:
            raise ApiError(404, f"no device {device_id!r}")
        return out

    @app.post(
        "/v1/devices/{device_id:path}/drain",
        response_model=S.DeviceOut,
        tags=["inventory"],
        responses={**R401, **R403, **R404, **R422},
    )
    def drain_device(device_id: DeviceId, _who: Admin) -> dict[str, Any]:
        """Admin: keep the device out of new slices (the slice holding it keeps it)."""
        return device_action(device_id, "drain")

    @app.post(
        "/v1/devices/{device_id:path}/fail",
        response_model=S.DeviceOut,
        tags=["inventory"],
        responses={**R401, **R403, **R404, **R422},
    )
    def fail_device(device_id: DeviceId, _who: Admin) -> dict[str, Any]:
        """Admin, fault injection: the device fails; only the slices using it are re-queued."""
        return device_action(device_id, "fail")

    @app.post(
        "/v1/devices/{device_id:path}/repair",
        response_model=S.DeviceOut,
        tags=["inventory"],
        responses={**R401, **R403, **R404, **R422},
    )
    def repair_device(device_id: DeviceId, _who: Admin) -> dict[str, Any]:
        """Admin: the device works again (and is no longer drained); it rejoins the pool."""
        return device_action(device_id, "repair")

    @app.get("/v1/links", response_model=S.LinkList, tags=["inventory"], responses={**R401})
    def list_links(_who: Who) -> dict[str, Any]:
        """Network links: bandwidth, up or down, the load the live slices put on them, and who uses them."""
        return {"links": store.links_view()}

    LinkId = Annotated[
        str,
        Path(
            max_length=160,
            description="A link id: up:<machine or pool>, or rack:<rack>.",
            examples=["up:iobox0", "rack:r0"],
        ),
    ]

    def link_action(link_id: str, action: str) -> dict[str, Any]:
        out = controller.set_link(link_id, action)
        if out is None:
            raise ApiError(404, f"no link {link_id!r} (links look like up:<node> or rack:<rack>; see GET /v1/links)")
        return out

    @app.post(
        "/v1/links/{link_id}/fail",
        response_model=S.LinkOut,
        tags=["inventory"],
        responses={**R401, **R403, **R404, **R422},
    )
    def fail_link(link_id: LinkId, _who: Admin) -> dict[str, Any]:
        """Admin, fault injection: the link drops; only the slices whose remote devices' path crosses
        it are torn down and their jobs re-queued; devices behind it leave the pool until it is repaired."""
        return link_action(link_id, "fail")

    @app.post(
        "/v1/links/{link_id}/repair",
        response_model=S.LinkOut,
        tags=["inventory"],
        responses={**R401, **R403, **R404, **R422},
    )
    def repair_link(link_id: LinkId, _who: Admin) -> dict[str, Any]:
        """Admin: the link is back; the devices behind it rejoin the pool."""
        return link_action(link_id, "repair")

    @app.get("/healthz", response_model=S.HealthOut, tags=["ops"])
    def healthz() -> dict[str, Any]:
        """Liveness: the API answers and the store is reachable."""
        store.ping()
        last = {k: float(v) for k, v in controller.round_info().items() if isinstance(v, int | float)}
        return {"status": "ok", "policy": controller.config.policy, "last_round": last}

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(controller.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/", include_in_schema=False, response_class=HTMLResponse)
    def dashboard() -> str:
        return render_dashboard(store)

    return app
