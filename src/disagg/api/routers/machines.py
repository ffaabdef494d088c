"""/v1/machines: the machines and pools of the inventory, with the slices that use them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from disagg.api import schemas as S
from disagg.api.deps import StoreDep, Who
from disagg.api.errors import R401

router = APIRouter()


@router.get("/v1/machines", response_model=S.MachineList, tags=["inventory"], responses={**R401})
def list_machines(_who: Who, store: StoreDep) -> dict[str, Any]:
    """Machines and pools, with the slices that use them."""
    return {"machines": store.machines_view()}
