"""/v1/devices: the devices of the inventory, and the admin's actions on one (drain, fail, repair).

A device id in a path may be any unique beginning of it (`iobox0/gpu3` or `iobox0/gpu3`'s first
characters): `disagg.api.ids`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from disagg.api import schemas as S
from disagg.api.deps import Admin, Jobs, StoreDep, Who
from disagg.api.errors import R401, R403, R404, R422, ApiError
from disagg.api.ids import R409_AMBIGUOUS, resolve
from disagg.api.paging import DEFAULT_LIMIT, Cursor, Limit, decode_cursor, next_link
from disagg.store import Principal

router = APIRouter()

DeviceId = Annotated[str, Path(min_length=1, max_length=160,
                               description="A device id, e.g. iobox0/gpu0, or any unique beginning of it.")]
_ONE = {**R401, **R403, **R404, **R409_AMBIGUOUS, **R422}


def _act(jobs: Jobs, device_id: str, action: str, who: Principal) -> dict[str, Any]:
    whole = resolve(jobs.store, "device", device_id, who)
    out = jobs.set_device(whole, action)
    if out is None:
        raise ApiError(404, f"no device {whole!r}")
    return out


@router.get("/v1/devices", response_model=S.DeviceList, tags=["inventory"], responses={**R401, **R422})
def list_devices(request: Request, _who: Who, store: StoreDep, limit: Limit = DEFAULT_LIMIT,
                 cursor: Cursor = None) -> dict[str, Any]:
    """Devices: free, attached (with the slice), failed or drained."""
    items, key = store.devices_page(limit, decode_cursor(cursor, int))
    return {"devices": items, "next": next_link(request, key)}


@router.post(
    "/v1/devices/{device_id:path}/drain",
    response_model=S.DeviceOut,
    tags=["inventory"],
    responses=_ONE,
)
def drain_device(device_id: DeviceId, who: Admin, jobs: Jobs) -> dict[str, Any]:
    """Admin: keep the device out of new slices (the slice holding it keeps it)."""
    return _act(jobs, device_id, "drain", who)


@router.post(
    "/v1/devices/{device_id:path}/fail",
    response_model=S.DeviceOut,
    tags=["inventory"],
    responses=_ONE,
)
def fail_device(device_id: DeviceId, who: Admin, jobs: Jobs) -> dict[str, Any]:
    """Admin, fault injection: the device fails; only the slices using it are re-queued."""
    return _act(jobs, device_id, "fail", who)


@router.post(
    "/v1/devices/{device_id:path}/repair",
    response_model=S.DeviceOut,
    tags=["inventory"],
    responses=_ONE,
)
def repair_device(device_id: DeviceId, who: Admin, jobs: Jobs) -> dict[str, Any]:
    """Admin: the device works again (and is no longer drained); it rejoins the pool."""
    return _act(jobs, device_id, "repair", who)
