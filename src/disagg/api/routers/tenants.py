"""/v1/tenants: each tenant's quota, usage, borrowing, fair share and jobs; an admin sets a tenant.

A tenant sees only itself; an admin sees every tenant the controller knows (from the spec, the
jobs and the tokens); `GET /v1/tenants/{name}` shows one, by its name or any unique beginning of it
among those the caller sees (`disagg.api.ids`). `PUT /v1/tenants/{name}` (admin) replaces that
tenant's entry of the tenants spec from the next round on; it is kept in the store, over the
config's entry. A limit lowered below what a queued job of the tenant asks for fails that job at
once (reason `over-limit`, naming the resource, the limit and the ask: docs/fairness.md). PUT takes
the name whole: it may name a tenant that does not exist yet, so a beginning would be ambiguous with
a new one.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from disagg.api import schemas as S
from disagg.api.deps import Admin, Jobs, Who
from disagg.api.errors import R400, R401, R403, R404, R422, ApiError
from disagg.api.ids import R409_AMBIGUOUS, one_match
from disagg.control.tenants import TenantDirectory, known_tenants
from disagg.model import SpecError
from disagg.model.tenants import tenant_name_clash, tenant_name_problem
from disagg.store.prefixes import matching

router = APIRouter()

TenantName = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                                 description="A tenant's name, e.g. alice (not admin or system).")]


@router.get("/v1/tenants", response_model=S.TenantList, tags=["tenants"], responses={**R401})
def list_tenants(who: Who, jobs: Jobs) -> dict[str, Any]:
    """Tenants with their quota, usage and fair share (a tenant sees only itself)."""
    return {"tenants": TenantDirectory(jobs.store, jobs.config).views(who)}


@router.get("/v1/tenants/{name}", response_model=S.TenantOut, tags=["tenants"],
            responses={**R401, **R404, **R409_AMBIGUOUS, **R422})
def get_tenant(name: Annotated[str, Path(min_length=1, max_length=64, description=(
        "A tenant's name, or any unique beginning of it."))], who: Who, jobs: Jobs) -> dict[str, Any]:
    """One tenant (a tenant sees only itself): quota, usage, fair share, jobs."""
    views = TenantDirectory(jobs.store, jobs.config).views(who)
    whole = one_match("tenant", name, matching(name, (v["name"] for v in views)), "name")
    return next(v for v in views if v["name"] == whole)


@router.put("/v1/tenants/{name}", response_model=S.TenantOut, tags=["tenants"],
            responses={**R400, **R401, **R403, **R422})
def set_tenant(name: TenantName, body: S.TenantIn, who: Admin, jobs: Jobs) -> dict[str, Any]:
    """Admin: set a tenant's weight, cohort, quota and borrowing limit (from the next round on)."""
    problem = tenant_name_problem(name) or tenant_name_clash(name, known_tenants(jobs.store, jobs.config))
    if problem:
        raise ApiError(422, f"tenant name {problem}", [{"field": "name", "message": problem}])
    directory = TenantDirectory(jobs.store, jobs.config)
    entry = body.model_dump(exclude_none=True)
    for part in ("quota", "borrow"):
        entry[part] = {k: v for k, v in entry.get(part, {}).items() if v is not None}
    try:
        directory.set_tenant(name, entry)
    except SpecError as exc:
        raise ApiError(422, str(exc), [{"field": "body", "message": p} for p in exc.problems]) from None
    directory.enforce(name)  # a lowered limit: its queued jobs that could never run now fail, with why
    jobs.limits.refresh()
    jobs.wake()
    return next(v for v in directory.views(who) if v["name"] == name)
