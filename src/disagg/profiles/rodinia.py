"""The eight Rodinia applications of the DRMaestro seed (001): the profile table disagg ships.

The numbers and where each comes from are in `rodinia.yaml` beside this module, a table in the same
form as an operator's `--profiles FILE` (`profiles.table`). It is package data, read once when this
module is imported: it is part of the code, not of the environment, so the lookups stay pure.
"""

from __future__ import annotations

from importlib import resources

import yaml

from disagg.profiles.model import Profile
from disagg.profiles.table import parse_profiles

#: The shipped table's file, inside the package.
SHIPPED_FILE = "rodinia.yaml"


def _shipped() -> dict[str, Profile]:
    text = resources.files("disagg.profiles").joinpath(SHIPPED_FILE).read_text(encoding="utf-8")
    return parse_profiles(yaml.safe_load(text), f"disagg/profiles/{SHIPPED_FILE}")


#: Every name the shipped table knows (aliases included) → profile.
SHIPPED: dict[str, Profile] = _shipped()

#: The eight applications, one entry each (their own names).
RODINIA: dict[str, Profile] = {name: p for name, p in SHIPPED.items() if p.name == name}
