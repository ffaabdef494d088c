"""/v1/tokens (admin): create, list and revoke bearer tokens.

A new token's secret is in the 201 answer only (the store keeps its hash). A list shows ids, tenants
and expiry, never a secret. A revoked (or expired) token answers 401 within a second in every API
process (`disagg.api.deps.TokenCache`), at once in the one that revoked it. A tenant's name must be
one a tenant may take (`disagg.model.tenants.tenant_name_problem`: not `admin` or `system` in any case or
with trailing punctuation, no control characters) and may not differ from a known tenant's only in case or
trailing punctuation (`tenant_name_clash`); an admin token may be named after anyone.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response

from disagg.api import schemas as S
from disagg.api.deps import Admin, Jobs, StoreDep, TokenCache
from disagg.api.errors import R400, R401, R403, R404, R422, ApiError
from disagg.api.paging import DEFAULT_LIMIT, Cursor, Limit, decode_cursor, next_link
from disagg.control.tenants import known_tenants
from disagg.model.tenants import TENANT_NAME, tenant_name_clash, tenant_name_problem

router = APIRouter()

TokenId = Annotated[int, Path(ge=1, le=2**62, description="A token's id (from GET /v1/tokens).")]


@router.post("/v1/tokens", status_code=201, response_model=S.TokenCreated, tags=["tokens"],
             responses={**R400, **R401, **R403, **R422})
def create_token(body: S.TokenIn, _who: Admin, store: StoreDep, jobs: Jobs) -> dict[str, Any]:
    """Admin: a new token for a tenant (or a new admin token); its secret is shown this once."""
    problem = (None if TENANT_NAME.fullmatch(body.tenant) else tenant_name_problem(body.tenant)) if body.admin \
        else tenant_name_problem(body.tenant) or tenant_name_clash(body.tenant, known_tenants(jobs.store, jobs.config))
    if problem:
        raise ApiError(422, f"tenant: {problem}", [{"field": "tenant", "message": problem}])
    info, token = store.issue_token(body.tenant, body.admin, body.expires_in_s)
    return {**info.to_json(), "token": token}


@router.get("/v1/tokens", response_model=S.TokenList, tags=["tokens"], responses={**R401, **R403, **R422})
def list_tokens(request: Request, _who: Admin, store: StoreDep, limit: Limit = DEFAULT_LIMIT,
                cursor: Cursor = None) -> dict[str, Any]:
    """Admin: the tokens that work (not revoked, not expired), oldest first, a page at a time; no secrets."""
    key = decode_cursor(cursor, int)
    found = store.tokens(int(key[0]) if key else None, limit + 1)
    page = found[:limit]
    more = [page[-1].id] if len(found) > limit else None
    return {"tokens": [t.to_json() for t in page], "next": next_link(request, more)}


@router.delete("/v1/tokens/{token_id}", status_code=204, tags=["tokens"], responses={**R401, **R403, **R404, **R422})
def revoke_token(token_id: TokenId, request: Request, _who: Admin, store: StoreDep) -> Response:
    """Admin: revoke a token; it answers 401 from now on (within a second in other API processes)."""
    if not store.revoke_token(token_id):
        raise ApiError(404, f"no token {token_id}")
    cache: TokenCache = request.app.state.tokens
    cache.clear()  # the secret is not known here, only its id: forget every cached token
    return Response(status_code=204)
