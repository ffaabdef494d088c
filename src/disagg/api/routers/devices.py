"""/v1/devices: the devices of the inventory, and the admin's actions on one (drain, fail, repair)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from disagg.api import schemas as S
from disagg.api.deps import Admin, Jobs, StoreDep, Who
from disagg.api.errors import R401, R403, R404, R422, ApiError
from disagg.api.paging import DEFAULT_LIMIT, Cursor, Limit, decode_cursor, next_link

router = APIRouter()

DeviceId = Annotated[str, Path(max_length=160, description="A device id, e.g. iobox0/gpu0.")]


def _act(jobs: Jobs, device_id: str, action: str) -> dict[str, Any]:
    out = jobs.set_device(device_id, action)
    if out is None:
        raise ApiError(404, f"no device {device_id!r}")
    return out


@router.get("/v1/devices", response_model=S.DeviceList, tags=["inventory"], responses={**R401, **R422})
def list_devices(request: Request, _who: Who, store: StoreDep, limit: Limit = DEFAULT_LIMIT,
                 cursor: Cursor = None) -> dict[str, Any]:
    """Devices: free, attached (with the slice), failed or drained."""
    items, key = store.devices_page(limit, decode_cursor(cursor, 1))
    return {"devices": items, "next": next_link(request, key)}


@router.post(
    "/v1/devices/{device_id:path}/drain",
    response_model=S.DeviceOut,
    tags=["inventory"],
    responses={**R401, **R403, **R404, **R422},
)
def drain_device(device_id: DeviceId, _who: Admin, jobs: Jobs) -> dict[str, Any]:
    """Admin: keep the device out of new slices (the slice holding it keeps it)."""
    return _act(jobs, device_id, "drain")


@router.post(
    "/v1/devices/{device_id:path}/fail",
    response_model=S.DeviceOut,
    tags=["inventory"],
    responses={**R401, **R403, **R404, **R422},
)
def fail_device(device_id: DeviceId, _who: Admin, jobs: Jobs) -> dict[str, Any]:
    """Admin, fault injection: the device fails; only the slices using it are re-queued."""
    return _act(jobs, device_id, "fail")


@router.post(
    "/v1/devices/{device_id:path}/repair",
    response_model=S.DeviceOut,
    tags=["inventory"],
    responses={**R401, **R403, **R404, **R422},
)
def repair_device(device_id: DeviceId, _who: Admin, jobs: Jobs) -> dict[str, Any]:
    """Admin: the device works again (and is no longer drained); it rejoins the pool."""
    return _act(jobs, device_id, "repair")
