"""/v1/slices: the composed environments of the caller's jobs, with their step records on request; one
slice by its id or any unique beginning of it (`disagg.api.ids`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from disagg.api import schemas as S
from disagg.api.deps import StoreDep, Who
from disagg.api.errors import R401, R404, R422, ApiError
from disagg.api.ids import R409_AMBIGUOUS, resolve
from disagg.api.paging import DEFAULT_LIMIT, Cursor, Limit, decode_cursor, next_link

router = APIRouter()

SliceId = Annotated[str, Path(min_length=1, max_length=64,
                              description="A slice id, e.g. s-0123456789ab, or any unique beginning of it.")]


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
    slices, key = store.slices_page(who, state, steps, limit, decode_cursor(cursor, float, str))
    return {"slices": slices, "next": next_link(request, key)}


@router.get("/v1/slices/{slice_id}", response_model=S.SliceOut, tags=["slices"],
            responses={**R401, **R404, **R409_AMBIGUOUS, **R422})
def get_slice(slice_id: SliceId, who: Who, store: StoreDep) -> dict[str, Any]:
    """A slice with its step records (of the caller's jobs; any for an admin)."""
    whole = resolve(store, "slice", slice_id, who)
    out = store.slice_view(whole, who)
    if out is None:
        raise ApiError(404, f"no slice {slice_id!r}")
    return out
