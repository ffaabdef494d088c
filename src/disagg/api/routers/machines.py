"""/v1/machines: the machines and pools of the inventory, with the slices that use them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from disagg.api import schemas as S
from disagg.api.deps import StoreDep, Who
from disagg.api.errors import R401, R422
from disagg.api.paging import DEFAULT_LIMIT, Cursor, Limit, decode_cursor, next_link

router = APIRouter()


@router.get("/v1/machines", response_model=S.MachineList, tags=["inventory"], responses={**R401, **R422})
def list_machines(request: Request, _who: Who, store: StoreDep, limit: Limit = DEFAULT_LIMIT,
                  cursor: Cursor = None) -> dict[str, Any]:
    """Machines and pools, with the slices that use them."""
    items, key = store.machines_page(limit, decode_cursor(cursor, int))
    return {"machines": items, "next": next_link(request, key)}
