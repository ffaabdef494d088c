"""/v1/links: the network links, the load the live slices put on them, and the admin's fault injection.

A link id in a path may be any unique beginning of it (`up:iob` for `up:iobox0`): `disagg.api.ids`.
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

LinkId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=160,
        description="A link id: up:<machine or pool>, or rack:<rack>; or any unique beginning of it.",
        examples=["up:iobox0", "rack:r0"],
    ),
]


_ONE = {**R401, **R403, **R404, **R409_AMBIGUOUS, **R422}


def _act(jobs: Jobs, link_id: str, action: str, who: Principal) -> dict[str, Any]:
    whole = resolve(jobs.store, "link", link_id, who, " (links look like up:<node> or rack:<rack>; see GET /v1/links)")
    out = jobs.set_link(whole, action)
    if out is None:
        raise ApiError(404, f"no link {whole!r}")
    return out


@router.get("/v1/links", response_model=S.LinkList, tags=["inventory"], responses={**R401, **R422})
def list_links(request: Request, _who: Who, store: StoreDep, limit: Limit = DEFAULT_LIMIT,
               cursor: Cursor = None) -> dict[str, Any]:
    """Network links: bandwidth, up or down, the load the live slices put on them, and who uses them."""
    items, key = store.links_page(limit, decode_cursor(cursor, str))
    return {"links": items, "next": next_link(request, key)}


@router.post(
    "/v1/links/{link_id}/fail",
    response_model=S.LinkOut,
    tags=["inventory"],
    responses=_ONE,
)
def fail_link(link_id: LinkId, who: Admin, jobs: Jobs) -> dict[str, Any]:
    """Admin, fault injection: the link drops; only the slices whose remote devices' path crosses
    it are torn down and their jobs re-queued; devices behind it leave the pool until it is repaired."""
    return _act(jobs, link_id, "fail", who)


@router.post(
    "/v1/links/{link_id}/repair",
    response_model=S.LinkOut,
    tags=["inventory"],
    responses=_ONE,
)
def repair_link(link_id: LinkId, who: Admin, jobs: Jobs) -> dict[str, Any]:
    """Admin: the link is back; the devices behind it rejoin the pool."""
    return _act(jobs, link_id, "repair", who)
