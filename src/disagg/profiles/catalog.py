"""The catalog: profiles by image (DRMaestro's "inference engine"), from a table given or the shipped Rodinia set.

Apart from `model.py` because the shipped set is built from `Profile`: model ← table ← rodinia ← catalog,
no cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any, TypeVar

from disagg.profiles.model import NEUTRAL, Profile, normalize_image
from disagg.profiles.rodinia import SHIPPED
from disagg.profiles.table import ProfileTable


def lookup(image: str, table: ProfileTable | None = None) -> Profile:
    """The profile for an image, or NEUTRAL when the image is unknown."""
    if table is None:
        return _lookup_shipped(image)
    return table.get(normalize_image(image), NEUTRAL)


@lru_cache(maxsize=4096)
def _lookup_shipped(image: str) -> Profile:
    """Lookups in the shipped set are pure, so they are cached (a queue repeats its images)."""
    return SHIPPED.get(normalize_image(image), NEUTRAL)


_J = TypeVar("_J", bound=Any)


def with_profiles(jobs: Sequence[_J], table: ProfileTable | None) -> list[_J]:
    """The jobs, each told its image's profile from `table` (`Job.profile`): what a round knows when the
    operator gave a table (`--profiles`) or the controller learned one. None: the jobs as they are
    (the shipped table)."""
    if table is None:
        return list(jobs)
    return [replace(job, profile=lookup(job.image, table)) for job in jobs]
