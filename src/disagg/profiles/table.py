"""Profile tables as data: the file format that `serve`, `place` and `simulate` take (`--profiles FILE`).

```yaml
profiles:
  - {image: acme/trainer, base_s: 240, transfer_share: 0.4, remote_factor: 1.6, load_sensitivity: 3.0,
     network_gbps: 4.0, source: "measured on our testbed, 2026-10"}
```

Parsing is pure (`parse_profiles` takes already-read data). A table maps a normalised image name
(`normalize_image`) to its `Profile`; an entry's `aliases` are other names of the same image. Every
problem names the file, the entry's image, the field, the value and the allowed range, as the other
specs do; a table with any problem is refused whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from disagg.model.errors import SpecError
from disagg.profiles.model import Profile, normalize_image

#: A table: normalised image name → profile.
ProfileTable = Mapping[str, Profile]

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)

#: The allowed ranges, stated once: the API's PUT, the file and the learner's clamps use them.
BOUNDS: dict[str, tuple[float, float]] = {
    "base_s": (0.001, 10_000_000.0),
    "transfer_share": (0.0, 1.0),
    "remote_factor": (1.0, 100.0),
    "load_sensitivity": (0.0, 100.0),
    "network_gbps": (0.001, 1000.0),
}


def _number(name: str) -> Any:
    low, high = BOUNDS[name]
    return Field(ge=low, le=high, allow_inf_nan=False)


class ProfileFields(BaseModel):
    """A profile's numbers and where they come from: the body of an admin's pin (`PUT /v1/profiles/{image}`)."""

    model_config = _STRICT
    base_s: float = _number("base_s")
    transfer_share: float = _number("transfer_share")
    remote_factor: float = _number("remote_factor")
    load_sensitivity: float = _number("load_sensitivity")
    network_gbps: float = _number("network_gbps")
    source: str = Field(default="", max_length=500, pattern=r"^[^\x00-\x08\x0b-\x1f\x7f]*$")

    def profile_of(self, image: str) -> Profile:
        return Profile(normalize_image(image), self.base_s, self.transfer_share, self.remote_factor,
                       self.load_sensitivity, self.network_gbps, self.source)


class ProfileEntry(ProfileFields):
    """One image's profile as a file writes it."""

    image: str = Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")
    aliases: list[str] = Field(default=[], max_length=64)

    def profile(self) -> Profile:
        return self.profile_of(self.image)


class ProfileTableSpec(BaseModel):
    model_config = _STRICT
    profiles: list[ProfileEntry] = Field(max_length=100_000)


def _entry_name(data: Any, index: int) -> str:
    try:
        image = data["profiles"][index]["image"]
    except (KeyError, IndexError, TypeError):
        return f"profiles[{index}]"
    return f"profiles[{index}] (image {image!r})" if isinstance(image, str) else f"profiles[{index}]"


def _problems(exc: ValidationError, data: Any) -> list[str]:
    out = []
    for err in exc.errors():
        loc = err["loc"]
        where = _entry_name(data, loc[1]) if len(loc) >= 2 and isinstance(loc[1], int) else "profiles"
        field = str(loc[2]) if len(loc) >= 3 else ""
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(ProfileEntry.model_fields)
            out.append(f"{where}: unknown field {field!r} (allowed: {allowed})" if field
                       else f"unknown field {loc[-1]!r} (allowed: profiles)")
        elif err["type"] == "missing":
            out.append(f"{where}.{field}: required field is missing" if field else f"{where}: required")
        else:
            allowed = _allowed(field)
            value = err.get("input")
            out.append(f"{where}.{field}: value {value!r} is not allowed: {err['msg']}{allowed}" if field
                       else f"{where}: {err['msg']}")
    return out


def _allowed(field: str) -> str:
    if field not in BOUNDS:
        return ""
    low, high = BOUNDS[field]
    return f" (allowed: {low:g} to {high:g})"


def parse_profiles(data: Any, source: str) -> dict[str, Profile]:
    """A profile table from a file's data; `SpecError` naming `source` and every problem otherwise."""
    if not isinstance(data, dict):
        raise SpecError(source, [f"expected a mapping with `profiles:`, got {type(data).__name__}"])
    try:
        spec = ProfileTableSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(source, _problems(exc, data)) from None
    table: dict[str, Profile] = {}
    owner: dict[str, int] = {}
    problems = []
    for i, entry in enumerate(spec.profiles):
        profile = entry.profile()
        for name in (profile.name, *(normalize_image(a) for a in entry.aliases)):
            if not name:
                problems.append(f"{_entry_name(data, i)}: image or alias {name!r} names no image")
            elif owner.get(name) == i:
                continue  # an alias that names the entry's own image once normalised (`x/b` beside `a/b`)
            elif name in owner:
                problems.append(f"{_entry_name(data, i)}: image {name!r} is already given by "
                                f"{_entry_name(data, owner[name])} (an image has one profile)")
            else:
                owner[name] = i
                table[name] = profile
    if problems:
        raise SpecError(source, problems)
    return table


def dump_profiles(table: ProfileTable) -> dict[str, Any]:
    """The file form of a table (one entry per profile, its other names as aliases): what
    `parse_profiles` reads back to the same table."""
    names: dict[Profile, list[str]] = {}
    for name, profile in table.items():
        names.setdefault(profile, []).append(name)
    entries = []
    for profile, keys in names.items():
        aliases = sorted(k for k in keys if k != profile.name)
        image = profile.name if profile.name in keys else keys[0]
        entry: dict[str, Any] = {"image": image, "base_s": profile.base_s,
                                 "transfer_share": profile.transfer_share, "remote_factor": profile.remote_factor,
                                 "load_sensitivity": profile.load_sensitivity, "network_gbps": profile.network_gbps,
                                 "source": profile.source}
        if image != profile.name:
            aliases = sorted(k for k in keys if k != image)
        if aliases:
            entry["aliases"] = aliases
        entries.append(entry)
    entries.sort(key=lambda e: e["image"])
    return {"profiles": entries}


def profile_fields(profile: Profile) -> dict[str, Any]:
    """A profile as an entry's fields (the API's and the store's JSON form)."""
    return {"image": profile.name, "base_s": profile.base_s, "transfer_share": profile.transfer_share,
            "remote_factor": profile.remote_factor, "load_sensitivity": profile.load_sensitivity,
            "network_gbps": profile.network_gbps, "source": profile.source}


def profile_from_fields(fields: dict[str, Any]) -> Profile:
    """`profile_fields` read back (validated as a file's entry is)."""
    return ProfileEntry.model_validate({k: fields[k] for k in ProfileEntry.model_fields if k in fields}).profile()
