"""Job profiles and the lookup by image (DRMaestro's "inference engine").

A profile says how long a job type runs with local devices, which share of that time is
host↔device transfer, how much that transfer part stretches when the device is remote, and how much
more it stretches under network load. The lookup is by container image; an unknown image gets the
neutral profile, whose expected time equals its SLO (utility 0, cost = preference: "neutral cost").
"""

from __future__ import annotations

from disagg.profiles.catalog import lookup, with_profiles
from disagg.profiles.model import NEUTRAL, Profile, expected_s, normalize_image
from disagg.profiles.rodinia import RODINIA, SHIPPED
from disagg.profiles.table import ProfileTable, dump_profiles, parse_profiles

__all__ = ["NEUTRAL", "RODINIA", "SHIPPED", "Profile", "ProfileTable", "dump_profiles", "expected_s", "lookup",
           "normalize_image", "parse_profiles", "with_profiles"]
