"""The catalog: profiles by image (DRMaestro's "inference engine"), from a table given or the shipped Rodinia set.

Apart from `model.py` because the shipped set is built from `Profile`: model ← rodinia ← catalog, no cycle.
"""

from __future__ import annotations

from functools import lru_cache

from disagg.profiles.model import NEUTRAL, Profile, normalize_image
from disagg.profiles.rodinia import ALIASES, RODINIA


def lookup(image: str, table: dict[str, Profile] | None = None) -> Profile:
    """The profile for an image, or NEUTRAL when the image is unknown."""
    if table is None:
        return _lookup_shipped(image)
    return table.get(normalize_image(image), NEUTRAL)


@lru_cache(maxsize=4096)
def _lookup_shipped(image: str) -> Profile:
    """Lookups in the shipped set are pure, so they are cached (a queue repeats its images)."""
    key = normalize_image(image)
    return RODINIA.get(ALIASES.get(key, key), NEUTRAL)
