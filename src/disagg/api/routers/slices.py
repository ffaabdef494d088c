"""/v1/slices: the composed environments of the caller's jobs, with their step records on request."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from disagg.api import schemas as S
from disagg.api.deps import StoreDep, Who
from disagg.api.errors import R401, R422

router = APIRouter()


@router.get("/v1/slices", response_model=S.SliceList, tags=["slices"], responses={**R401, **R422})
def list_slices(
    who: Who,
    store: StoreDep,
    state: S.SliceState | None = None,
    steps: bool = False,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> dict[str, Any]:
    """Slices (of the caller's jobs; all for an admin), newest first; `steps` adds their step records."""
    return {"slices": store.slices_list(who, state, steps, limit)}
