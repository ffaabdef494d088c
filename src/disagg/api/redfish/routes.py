"""The Redfish service's routes: reads of the inventory as resources, and the writes a Redfish client
makes — log in and out, compose a system (`POST Systems`), add and remove its blocks (its actions, or a
PATCH of its blocks, where the service lets compositions be updated), decompose it (`DELETE Systems/{id}`)
— each following its task monitor. Unauthenticated: `/redfish`, the service root, `$metadata`, `odata` and the
login itself; everything else needs a session, Basic credentials or a bearer token (`auth.caller`)."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from disagg.api.ratelimit import TenantBuckets, retry_after
from disagg.api.redfish import resources as R
from disagg.api.redfish import services as S
from disagg.api.redfish import systems as Y
from disagg.api.redfish.auth import Sessions, caller, login
from disagg.api.redfish.protocol import RedfishError, RedfishResponse, check_if_match, etag
from disagg.control.jobs import JobService
from disagg.control.tenants import TenantDirectory
from disagg.model.slices import SliceMachine
from disagg.model.states import DECOMPOSABLE_SLICE_STATES, SliceState
from disagg.placement.compositions import composition_problem
from disagg.store import CompositionRefused, LiveSlice, Principal
from disagg.store.compositions import Admit
from disagg.store.ports import ApiPort

Caller = Annotated[Principal, Depends(caller)]
router = APIRouter()


def _store(request: Request) -> ApiPort:
    store: ApiPort = request.app.state.store
    return store


def _view(request: Request, who: Principal) -> R.View:
    """The inventory as `who` sees it: every block and zone, the systems of its own slices (all: an admin)."""
    return R.View(_store(request).redfish_inventory(), lambda s: who.admin or s.tenant == who.tenant)


def _updatable(request: Request) -> bool:
    """Whether compositions may be updated (`redfish_updatable`, on by default)."""
    return bool(request.app.state.jobs.config.redfish_updatable)


def _found(payload: dict[str, Any] | None, what: str) -> RedfishResponse:
    if payload is None:
        raise RedfishError(404, "ResourceNotFound", f"{what} does not exist", [what])
    return RedfishResponse(payload)


GET = ["GET", "HEAD"]


# --- unauthenticated ---------------------------------------------------------------------------------
@router.api_route("/", methods=GET)
def version() -> RedfishResponse:
    return RedfishResponse(S.version_document())


@router.api_route("/v1", methods=GET)
@router.api_route("/v1/", methods=GET)
def root(request: Request) -> RedfishResponse:
    return RedfishResponse(S.service_root(request.app.state.service_uuid))


@router.api_route("/v1/odata", methods=GET)
def odata() -> RedfishResponse:
    from disagg.api.redfish.metadata import service_document

    return RedfishResponse(service_document())


@router.api_route("/v1/$metadata", methods=GET)
def metadata() -> Response:
    from disagg.api.redfish.metadata import metadata_xml

    return Response(metadata_xml(), media_type="application/xml")


@router.post("/v1/SessionService/Sessions")
@router.post("/v1/SessionService/Sessions/Members")
async def log_in(request: Request) -> RedfishResponse:
    body = await _json(request)
    who = await login(_store(request), body.get("UserName"), body.get("Password"))
    sessions: Sessions = request.app.state.sessions
    s = sessions.open(who, str(body["Password"]), who.tenant)
    return RedfishResponse(S.session(s), 201, {"X-Auth-Token": s.key, "Location": f"{S.SESSIONS}/{s.id}"})


async def _json(request: Request) -> dict[str, Any]:
    """The body of a write: a JSON object sent as `application/json` (415 otherwise: a page of another site
    can send `text/plain` with a browser's Basic credentials, but not `application/json`, without a preflight)."""
    media = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise RedfishError(415, "GeneralError", f"a write must be sent as application/json, not "
                           f"{media or 'no Content-Type'}", [media])
    try:
        body = await request.json()
    except ValueError:
        raise RedfishError(400, "MalformedJSON", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise RedfishError(400, "MalformedJSON", "the body must be a JSON object")
    return body


# --- sessions, accounts, roles --------------------------------------------------------------------
@router.api_route("/v1/SessionService", methods=GET)
def session_service(_who: Caller) -> RedfishResponse:
    return RedfishResponse(S.session_service())


@router.api_route("/v1/SessionService/Sessions", methods=GET)
def sessions_list(request: Request, who: Caller) -> RedfishResponse:
    items = [s for s in request.app.state.sessions.all() if who.admin or s.who.tenant == who.tenant]
    return RedfishResponse(S.sessions(items))


@router.api_route("/v1/SessionService/Sessions/{ident}", methods=GET)
def session_get(request: Request, ident: str, who: Caller) -> RedfishResponse:
    s = request.app.state.sessions.by_id(ident)
    return _found(S.session(s) if s is not None and (who.admin or s.who.tenant == who.tenant) else None,
                  f"session {ident}")


@router.delete("/v1/SessionService/Sessions/{ident}")
def session_delete(request: Request, ident: str, who: Caller) -> Response:
    sessions: Sessions = request.app.state.sessions
    s = sessions.by_id(ident)
    if s is None or not (who.admin or s.who.tenant == who.tenant):
        raise RedfishError(404, "ResourceNotFound", f"session {ident} does not exist", [ident])
    sessions.close(ident)
    return Response(status_code=204)


@router.api_route("/v1/AccountService", methods=GET)
def account_service(_who: Caller) -> RedfishResponse:
    return RedfishResponse(S.account_service())


@router.api_route("/v1/AccountService/Accounts", methods=GET)
def accounts(who: Caller) -> RedfishResponse:
    return RedfishResponse(S.accounts(who.tenant))


@router.api_route("/v1/AccountService/Accounts/{ident}", methods=GET)
def account(ident: str, who: Caller) -> RedfishResponse:
    return _found(S.account(who.tenant, who.admin) if ident == who.tenant else None, f"account {ident}")


@router.api_route("/v1/AccountService/Roles", methods=GET)
def roles(_who: Caller) -> RedfishResponse:
    return RedfishResponse(S.roles())


@router.api_route("/v1/AccountService/Roles/{ident}", methods=GET)
def role(ident: str, _who: Caller) -> RedfishResponse:
    return _found(S.role(ident), f"role {ident}")


# --- composition service: blocks and zones --------------------------------------------------------
@router.api_route("/v1/CompositionService", methods=GET)
def composition_service(_who: Caller) -> RedfishResponse:
    return RedfishResponse(S.composition_service())


@router.api_route("/v1/CompositionService/ResourceBlocks", methods=GET)
def blocks(request: Request, who: Caller) -> RedfishResponse:
    return RedfishResponse(R.collection(R.BLOCKS, "#ResourceBlockCollection.ResourceBlockCollection",
                                        "Resource blocks", R.blocks(_view(request, who))))


@router.api_route("/v1/CompositionService/ResourceBlocks/{ident}", methods=GET)
def block(request: Request, ident: str, who: Caller) -> RedfishResponse:
    return _found(R.block(_view(request, who), ident), f"resource block {ident}")


@router.api_route("/v1/CompositionService/ResourceBlocks/{ident}/{kind}/{part}", methods=GET)
def block_part(request: Request, ident: str, kind: str, part: str, who: Caller) -> RedfishResponse:
    return _found(R.component(_view(request, who), ident, kind, part), f"{kind}/{part} of block {ident}")


@router.api_route("/v1/CompositionService/ResourceZones", methods=GET)
def zones(request: Request, who: Caller) -> RedfishResponse:
    return RedfishResponse(R.collection(R.ZONES, "#ZoneCollection.ZoneCollection", "Resource zones",
                                        R.zones(_view(request, who))))


@router.api_route("/v1/CompositionService/ResourceZones/{ident}", methods=GET)
def zone(request: Request, ident: str, who: Caller) -> RedfishResponse:
    return _found(R.zone(_view(request, who), ident), f"resource zone {ident}")


@router.api_route("/v1/Chassis", methods=GET)
def chassis_list(request: Request, who: Caller) -> RedfishResponse:
    return RedfishResponse(R.collection(R.CHASSIS, "#ChassisCollection.ChassisCollection", "Chassis",
                                        R.chassis_list(_view(request, who))))


@router.api_route("/v1/Chassis/{ident}", methods=GET)
def chassis(request: Request, ident: str, who: Caller) -> RedfishResponse:
    return _found(R.chassis(_view(request, who), ident), f"chassis {ident}")


# --- systems: composing and decomposing ----------------------------------------------------------
@router.api_route("/v1/Systems", methods=GET)
def systems(request: Request, who: Caller) -> RedfishResponse:
    return RedfishResponse(Y.systems(_view(request, who)))


@router.api_route("/v1/Systems/Capabilities", methods=GET)
def capabilities(request: Request, _who: Caller) -> RedfishResponse:
    return RedfishResponse(Y.capabilities(_updatable(request)))


@router.api_route("/v1/Systems/{ident}", methods=GET)
def system(request: Request, ident: str, who: Caller) -> RedfishResponse:
    return _found(Y.system(_view(request, who), ident, _updatable(request)), f"system {ident}")


@router.post("/v1/Systems")
@router.post("/v1/Systems/Members")
async def compose(request: Request, who: Caller) -> RedfishResponse:
    """Specific composition: a slice with no job, composing; 202 and its task monitor."""
    body = await _json(request)
    store = _store(request)
    view = await run_in_threadpool(_view, request, who)
    req = Y.parse_compose(body, view)
    _rate(request, who.tenant)
    config = request.app.state.jobs.config
    try:
        slice_id = await run_in_threadpool(partial(
            store.compose, who.tenant, req.name, req.host, req.devices, req.cpus, req.memory_gb,
            device_gbps=config.composition_device_gbps, admit=_admit(request, who.tenant),
            most=config.max_compositions_per_tenant))
    except CompositionRefused as exc:
        _refused(exc)
    jobs: JobService = request.app.state.jobs
    jobs.wake()
    s = await run_in_threadpool(store.any_slice, slice_id)
    assert s is not None
    return RedfishResponse(Y.task(s), 202, {"Location": f"{R.MONITORS}/{s.id}"})


def _rate(request: Request, tenant: str) -> None:
    """429 with Retry-After when `tenant` composes (or updates) faster than `compose_rate_per_tenant`."""
    buckets: TenantBuckets = request.app.state.compose_buckets
    wait = buckets.take(tenant)
    if wait:
        raise RedfishError(429, "GeneralError", f"tenant {tenant!r} composes faster than "
                           f"{request.app.state.jobs.config.compose_rate_per_tenant:g} a second "
                           "(compose_rate_per_tenant): retry after Retry-After seconds",
                           headers={"Retry-After": retry_after(wait)})


def _admit(request: Request, tenant: str) -> Admit:
    """The quota check of a composition of `tenant` (`placement.compositions`), on the tenants spec now."""
    jobs: JobService = request.app.state.jobs
    tenants = TenantDirectory(jobs.store, jobs.config).tenants()
    return lambda held, want: composition_problem(tenants, tenant, held, want)


def _refused(exc: CompositionRefused) -> None:
    if exc.exhausted:
        raise RedfishError(409, "ResourceExhaustion", str(exc), [str(exc)])
    if exc.unknown:
        uris = [f"{R.BLOCKS}/{R.block_id(x)}" for x in exc.unknown]
        raise RedfishError(400, "ResourceMissingAtURI", str(exc), uris[:1])
    uris = [f"{R.BLOCKS}/{R.block_id(x)}" for x in exc.in_use]
    raise RedfishError(409, "ResourceInUse", str(exc), uris)


@router.delete("/v1/Systems/{ident}")
def decompose(request: Request, ident: str, who: Caller) -> RedfishResponse:
    """Decompose a composition the caller owns: to teardown; 202 and the task monitor of its teardown."""
    view = _view(request, who)
    found = view.machines_of_slices().get(ident)
    if found is None:
        raise RedfishError(404, "ResourceNotFound", f"system {ident} does not exist", [ident])
    s, _ = found
    if s.job_id is not None:
        raise RedfishError(405, "ResourceCannotBeDeleted", f"system {ident} is the slice of job {s.job_id}: "
                           f"cancel the job (DELETE /v1/jobs/{s.job_id})", [ident])
    payload = Y.system(view, ident, _updatable(request))
    check_if_match(request, payload or {})
    store = _store(request)
    if s.state in DECOMPOSABLE_SLICE_STATES:
        store.decompose(s.id, Y.DECOMPOSED)
        request.app.state.jobs.wake()
    now = store.any_slice(s.id) or s
    return RedfishResponse(Y.task(now, Y.DECOMPOSE), 202, {"Location": f"{R.MONITORS}/{s.id}{Y.DECOMPOSE}"})


# --- systems: updating (AddResourceBlock, RemoveResourceBlock, PATCH) ------------------------------
def _updating(request: Request, who: Principal, ident: str) -> tuple[R.View, LiveSlice, SliceMachine, dict[str, Any]]:
    """The composition an update names, the caller's view, the composed machine and its payload; 404, or
    400 when it cannot be updated (a job's slice; a service configured with `redfish_updatable: false`)."""
    view = _view(request, who)
    updatable = _updatable(request)
    found = view.machines_of_slices().get(ident)
    payload = Y.system(view, ident, updatable)
    if found is None or payload is None:
        raise RedfishError(404, "ResourceNotFound", f"system {ident} does not exist", [ident])
    s, i = found
    if s.job_id is not None or not updatable:
        why = (f"system {ident} is the slice of job {s.job_id}: its blocks are the job's" if s.job_id is not None
               else "this service composes systems at once (redfish_updatable: false)")
        raise RedfishError(400, "ActionNotSupported", why, [ident])
    check_if_match(request, payload)
    return view, s, s.placement.machines[i], payload


def _update(request: Request, s: LiveSlice, ident: str, add: list[str], remove: list[str], what: str) -> Response:
    """Update the composition (`Store.update_composition`): 202 and the update's task monitor; 204 when
    there was nothing to change. 409 ResourceInUse for a block in use (or a system not composed yet), 400
    naming a block that cannot be added or removed."""
    store = _store(request)
    _rate(request, s.tenant or "")
    try:
        changed = store.update_composition(s.id, add, remove, request.app.state.jobs.config.composition_device_gbps,
                                           _admit(request, s.tenant or ""))
    except CompositionRefused as exc:
        if exc.exhausted:
            _refused(exc)
        if exc.in_use == (s.id,):
            raise RedfishError(409, "ResourceInUse", str(exc), [f"{R.SYSTEMS}/{ident}"]) from None
        if exc.in_use:
            _refused(exc)
        uris = [f"{R.BLOCKS}/{R.block_id(x)}" for x in exc.unknown]
        raise RedfishError(400, "ActionParameterValueNotInList", str(exc), [uris[0], "ResourceBlock", what]) from None
    if not changed:
        return Response(status_code=204)
    request.app.state.jobs.wake()
    now = store.any_slice(s.id) or s
    return RedfishResponse(Y.task(now, Y.UPDATE), 202, {"Location": f"{R.MONITORS}/{s.id}{Y.UPDATE}"})


@router.post("/v1/Systems/{ident}/Actions/ComputerSystem.{action}")
async def system_action(request: Request, ident: str, action: str, who: Caller) -> Response:
    """`#ComputerSystem.AddResourceBlock` / `RemoveResourceBlock`: one block added to or removed from a
    composition, through its slice's state machine (module docstring of `disagg.store.compositions`)."""
    if action not in Y.ACTIONS:
        raise RedfishError(404, "ResourceNotFound", f"system {ident} has no action {action}", [action])
    body = await _json(request)
    view, s, _, payload = await run_in_threadpool(_updating, request, who, ident)
    req = Y.parse_action(body, action)
    if req.system_etag is not None and req.system_etag != etag(payload):
        raise RedfishError(412, "PreconditionFailed", "ComputerSystemETag is not the system's current ETag")
    block = R.block(view, R.block_id(req.block))
    if block is None:
        uri = f"{R.BLOCKS}/{R.block_id(req.block)}"
        raise RedfishError(400, "ActionParameterValueNotInList", f"resource block {uri} does not exist",
                           [uri, "ResourceBlock", action])
    if req.block_etag is not None and req.block_etag != etag(block):
        raise RedfishError(412, "PreconditionFailed", "ResourceBlockETag is not the block's current ETag")
    if action == "AddResourceBlock" and Y.compute_blocks(view, [req.block]):
        raise RedfishError(400, "ActionParameterValueNotInList", f"a composed system has exactly one Compute "
                           f"block; {req.block} is another one", [f"{R.BLOCKS}/{R.block_id(req.block)}",
                                                                   "ResourceBlock", action])
    add, remove = ([req.block], []) if action == "AddResourceBlock" else ([], [req.block])
    return await run_in_threadpool(_update, request, s, ident, add, remove, action)


@router.patch("/v1/Systems/{ident}")
async def system_patch(request: Request, ident: str, who: Caller) -> Response:
    """A new `Links.ResourceBlocks`: the blocks it adds and removes, as the actions would."""
    body = await _json(request)
    view, s, m, _ = await run_in_threadpool(_updating, request, who, ident)
    add, remove = Y.parse_patch(body, [m.host, *m.devices])
    hosts = Y.compute_blocks(view, add)
    if hosts:
        raise RedfishError(400, "PropertyValueConflict", f"a composed system has exactly one Compute block; "
                           f"{hosts[0]} is another one", ["Links.ResourceBlocks", hosts[0]])
    return await run_in_threadpool(_update, request, s, ident, add, remove, "PATCH")


# --- tasks -------------------------------------------------------------------------------------------
def _composition(request: Request, who: Principal, ident: str) -> tuple[LiveSlice, str]:
    """The composition a task id names and the task's suffix (its decomposition's, its update's, or none);
    404 if not the caller's."""
    suffix = next((x for x in (Y.DECOMPOSE, Y.UPDATE) if ident.endswith(x)), "")
    s = _store(request).any_slice(ident.removesuffix(suffix) if suffix else ident)
    if s is None or s.job_id is not None or not (who.admin or s.tenant == who.tenant):
        raise RedfishError(404, "ResourceNotFound", f"task {ident} does not exist", [ident])
    return s, suffix


@router.api_route("/v1/TaskService", methods=GET)
def task_service(_who: Caller) -> RedfishResponse:
    return RedfishResponse(S.task_service())


@router.api_route("/v1/TaskService/Tasks", methods=GET)
def tasks(request: Request, who: Caller) -> RedfishResponse:
    view = _view(request, who)
    ids = [s.id for s in view.inv.slices if s.job_id is None and view.visible(s)]
    return RedfishResponse(R.collection(R.TASKS, "#TaskCollection.TaskCollection", "Tasks",
                                        [f"{R.TASKS}/{i}" for i in ids]))


@router.api_route("/v1/TaskService/Tasks/{ident}", methods=GET)
def task(request: Request, ident: str, who: Caller) -> RedfishResponse:
    s, suffix = _composition(request, who, ident)
    return RedfishResponse(Y.task(s, suffix))


@router.api_route("/v1/TaskService/TaskMonitors/{ident}", methods=GET)
def monitor(request: Request, ident: str, who: Caller) -> Response:
    """202 while the task runs; then the operation's answer: 201 and the system (composed), 204 (decomposed,
    or updated), or the error."""
    s, suffix = _composition(request, who, ident)
    state = Y.task_state(s, suffix)
    if state == "Running":
        return RedfishResponse(Y.task(s, suffix), 202, {"Location": f"{R.MONITORS}/{ident}"})
    if suffix == Y.UPDATE and state == "Exception":
        why = s.detail if s.state == SliceState.COMPOSED else f"the composition was torn down ({s.detail})"
        raise RedfishError(409, "GeneralError", f"the update did not take place: {why}", [s.detail or ""])
    if suffix:
        return Response(status_code=204)
    if state == "Exception":
        raise RedfishError(409, "GeneralError", f"the composition failed: {s.detail}", [s.detail or ""])
    name = s.placement.machines[0].name
    payload = Y.system(_view(request, who), name, _updatable(request))
    if payload is None or s.state != SliceState.COMPOSED:
        raise RedfishError(404, "ResourceNotFound", f"system {name} was decomposed", [name])
    return RedfishResponse(payload, 201, {"Location": f"{R.SYSTEMS}/{name}"})


__all__ = ["router"]
