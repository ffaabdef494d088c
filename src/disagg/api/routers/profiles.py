"""/v1/profiles: what the controller knows of each image — the table's entry, what it learned from the
image's completed tasks (with its uncertainty and how many tasks it rests on), an admin's pin — and
which of them the policies place by (`used`). An admin pins a profile with PUT (learning never
replaces a pin) and drops the pin with DELETE. `docs/profiles.md`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response

from disagg.api.deps import Admin, Jobs, Who
from disagg.api.errors import R400, R401, R403, R404, R422, ApiError
from disagg.api.paging import DEFAULT_LIMIT, Cursor, Limit, decode_cursor, next_link
from disagg.control.profiles import ProfileDirectory
from disagg.profiles.model import normalize_image
from disagg.profiles.table import ProfileFields

router = APIRouter()

Image = Annotated[str, Path(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$",
                            description="An image, e.g. acme/trainer:2 (matched as placement matches it: "
                                        "lower case, without registry, tag or digest).")]


@router.get("/v1/profiles", tags=["profiles"], responses={**R400, **R401, **R422})
def list_profiles(request: Request, _who: Who, jobs: Jobs, limit: Limit = DEFAULT_LIMIT,
                  cursor: Cursor = None) -> dict[str, Any]:
    """Every image the table or the store knows: the profile used, the learned estimate, the pin."""
    key = decode_cursor(cursor, str)
    items, last = ProfileDirectory(jobs.store, jobs.config).page(None if key is None else str(key[0]), limit)
    return {"profiles": items, "next": next_link(request, None if last is None else [last])}


def _named(image: str) -> str:
    """The image as placement matches it. A path that names no image (":", "rodinia-", "x/:7") is a 404,
    not a pin under the empty name: no profile is there, and none can be (a 422 would refuse a path the
    schema's pattern allows)."""
    name = normalize_image(image)
    if not name:
        raise ApiError(404, f"image {image!r} names no image: without registry, tag, digest and rodinia- prefix "
                            "nothing is left (a name such as acme/trainer:2 names the image trainer)")
    return name


@router.get("/v1/profiles/{image:path}", tags=["profiles"], responses={**R400, **R401, **R404, **R422})
def get_profile(image: Image, _who: Who, jobs: Jobs) -> dict[str, Any]:
    """One image: the profile used, the table's entry, the learned estimate and its uncertainty."""
    out = ProfileDirectory(jobs.store, jobs.config).one(_named(image))
    if out is None:
        raise ApiError(404, f"no profile for image {image!r}: it is in no table and no task of it has completed")
    return out


@router.put("/v1/profiles/{image:path}", tags=["profiles"], responses={**R400, **R401, **R403, **R404, **R422})
def pin_profile(image: Image, body: ProfileFields, _who: Admin, jobs: Jobs) -> dict[str, Any]:
    """Admin: pin the image's profile (the policies use it from the next rounds; learning keeps observing
    but never replaces it)."""
    out = ProfileDirectory(jobs.store, jobs.config).pin(_named(image), body.profile_of(_named(image)))
    jobs.wake()
    return out


@router.delete("/v1/profiles/{image:path}", status_code=204, tags=["profiles"],
               responses={**R400, **R401, **R403, **R404, **R422})
def unpin_profile(image: Image, _who: Admin, jobs: Jobs) -> Response:
    """Admin: drop the image's pin (the table's entry, or learning, decides again)."""
    if not ProfileDirectory(jobs.store, jobs.config).unpin(_named(image)):
        raise ApiError(404, f"no pinned profile for image {image!r}")
    jobs.wake()
    return Response(status_code=204)
