"""/v1/slices: the composed environments of the caller's jobs, with their step records on request."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from disagg.api import schemas as S
from disagg.api.deps import StoreDep, Who
from disagg.api.errors import R401, R422
from disagg.api.paging import DEFAULT_LIMIT, Cursor, Limit, decode_cursor, next_link

router = APIRouter()


@router.get("/v1/slices", response_model=S.SliceList, tags=["slices"], responses={**R401, **R422})
def list_slices(
    request: Request,
    who: Who,
    store: StoreDep,
    state: S.SliceState | None = None,
    steps: bool = False,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Slices (of the caller's jobs; all for an admin), newest first, a page at a time (`next`); `steps`
    adds their step records."""
    slices, key = store.slices_page(who, state, steps, limit, decode_cursor(cursor, 2))
    return {"slices": slices, "next": next_link(request, key)}
