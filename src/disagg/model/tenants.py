"""Tenants: who submits jobs, the Unix user their jobs run as, and their share of the cluster.

A tenants spec (YAML or JSON, a file or the `tenants:` section of the serve config):

    tenants:
      - {name: alice, weight: 2, cohort: research, unix_user: alice,
         quota:  {gpu: 8, cpus: 64, memory_gb: 512, network_gbps: 40},   # nominal: guaranteed
         borrow: {gpu: 8}}                                                # at most this much above nominal
      - {name: bob, weight: 1, cohort: research, quota: {gpu: 4, cpus: 32, memory_gb: 256}}
      - {name: web, network: host}    # its jobs use the host's network (default: loopback of their own)

Resources are `cpus`, `memory_gb`, `network_gbps` and the device kinds (`gpu`, `nvme`, `fpga`,
`memory`); a resource a tenant's quota does not name is unlimited for it. A tenant the spec does not
list gets the defaults (weight 1, no cohort, no limits). Parsing is pure; errors name the field, the
value and what is allowed (`SpecError`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from disagg.model.cluster import DEVICE_KINDS
from disagg.model.errors import SpecError
from disagg.model.spec import read_document, validate_spec

#: What a quota or a borrowing limit may name.
RESOURCES: tuple[str, ...] = ("cpus", "memory_gb", "network_gbps", *DEVICE_KINDS)
#: Names a tenant may not take: they mean something to the controller itself.
RESERVED_NAMES = frozenset({"admin", "system"})
#: A tenant's name: it becomes part of a Unix user name (`disagg-<tenant>`) and of paths.
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: A Unix user name as `useradd` takes it.
UNIX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


def canonical_name(name: str) -> str:
    """What two tenant names must not share: the name in lower case without trailing '.', '_' or '-'
    (`Alice`, `alice.` and `alice` are one tenant to a reader, and `Admin` is `admin`)."""
    return name.lower().rstrip("._-")


def tenant_name_problem(name: str) -> str | None:
    """Why `name` cannot be a tenant's name (None when it can): a reserved name in any case, with or without
    trailing punctuation, is refused, as is anything that is not 1–64 letters, digits, '_', '.', '-'."""
    if canonical_name(name) in RESERVED_NAMES:
        return (f"{name!r} is reserved (not allowed: {', '.join(sorted(RESERVED_NAMES))}, in any case, with or "
                "without trailing '.', '_' or '-')")
    if not TENANT_NAME.fullmatch(name):
        return f"{name!r} is not allowed; use 1–64 letters, digits, '_', '.', '-', starting with a letter or digit"
    return None


def tenant_name_clash(name: str, existing: Iterable[str]) -> str | None:
    """Why `name` may not be a new tenant's name beside the `existing` ones: it differs from one of them
    only in case or trailing punctuation (`canonical_name`). None when it is one of them, or clashes with none."""
    mine = canonical_name(name)
    for other in sorted(set(existing)):
        if other != name and canonical_name(other) == mine:
            return (f"{name!r} differs from the existing tenant {other!r} only in case or trailing '.', '_' or '-' "
                    "(tenant names must differ in more than that)")
    return None


#: As strict as the API (and the cluster and jobs specs): no bool for a number, no string for a number.
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


#: The largest limit of any resource: far above any cluster, and small enough that a quota plus its
#: borrowing stays a finite number (1e308 + 1e308 was infinity, which JSON writes as null).
MAX_LIMIT = 1e12


class Limits(BaseModel):
    """Per resource: cpus, memory_gb, network_gbps and the device kinds (a resource not named: unlimited).
    The API's `LimitsIn` is this model, so the spec file and PUT /v1/tenants refuse the same input."""

    model_config = _STRICT
    cpus: float | None = Field(default=None, ge=0, le=MAX_LIMIT)
    memory_gb: float | None = Field(default=None, ge=0, le=MAX_LIMIT)
    network_gbps: float | None = Field(default=None, ge=0, le=MAX_LIMIT)
    gpu: float | None = Field(default=None, ge=0, le=MAX_LIMIT)
    nvme: float | None = Field(default=None, ge=0, le=MAX_LIMIT)
    fpga: float | None = Field(default=None, ge=0, le=MAX_LIMIT)
    memory: float | None = Field(default=None, ge=0, le=MAX_LIMIT)


class TenantSpec(BaseModel):
    model_config = _STRICT
    name: str
    weight: float = Field(default=1.0, gt=0, le=1_000_000)
    cohort: str | None = Field(default=None, min_length=1, max_length=64)
    unix_user: str | None = None
    network: Literal["loopback", "host"] | None = None
    quota: Limits = Limits()
    borrow: Limits = Limits()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = tenant_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("unix_user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        if value is not None and not UNIX_USER.fullmatch(value):
            raise ValueError(f"{value!r} is not a Unix user name (lower case, digits, '_', '-', up to 32)")
        return value


class TenantsSpec(BaseModel):
    model_config = _STRICT
    tenants: list[TenantSpec] = Field(default_factory=list, max_length=10_000)


@dataclass(frozen=True)
class Tenant:
    """One tenant: its weight and cohort, the Unix user its jobs run as (None: the default), and its
    nominal quota and borrowing limit per resource (a resource not named: unlimited)."""

    name: str
    weight: float = 1.0
    cohort: str | None = None
    unix_user: str | None = None
    quota: Mapping[str, float] = field(default_factory=dict)
    borrow: Mapping[str, float] = field(default_factory=dict)
    #: Its jobs' network: `loopback` (a namespace of the job's own, the default) or `host` (the host's).
    network: str | None = None

    def limit(self, resource: str) -> float:
        """The most of `resource` the tenant may hold: quota + borrow (inf when its quota does not name it)."""
        if resource not in self.quota:
            return math.inf
        return self.quota[resource] + self.borrow.get(resource, 0.0)


@dataclass(frozen=True)
class Tenants:
    """Every tenant the spec names, by name; `get` gives the defaults to one it does not name."""

    by_name: Mapping[str, Tenant] = field(default_factory=dict)

    def get(self, name: str) -> Tenant:
        return self.by_name.get(name) or Tenant(name)

    def __len__(self) -> int:
        return len(self.by_name)


def parse_tenants(data: Any, source: str = "<tenants>") -> Tenants:
    """Tenants from already-read data: `{"tenants": [...]}` or the list itself."""
    if isinstance(data, list):
        data = {"tenants": data}
    spec: TenantsSpec = validate_spec(TenantsSpec, data, source)
    counts = Counter(t.name for t in spec.tenants)
    dup = sorted(n for n, c in counts.items() if c > 1)
    if dup:
        raise SpecError(source, [f"tenants: the name {n!r} is used more than once" for n in dup])
    names = [t.name for t in spec.tenants]
    clashes = [f"tenants[{i}].name: {c}" for i, n in enumerate(names) if (c := tenant_name_clash(n, names[:i]))]
    if clashes:
        raise SpecError(source, clashes)
    problems = []
    for i, t in enumerate(spec.tenants):
        for res, extra in _given(t.borrow).items():
            if res not in _given(t.quota) and extra:
                problems.append(f"tenants[{i}].borrow.{res}: borrowing {extra:g} needs a quota of {res} to add to")
    if problems:
        raise SpecError(source, problems)
    return Tenants({t.name: Tenant(t.name, t.weight, t.cohort, t.unix_user, _given(t.quota), _given(t.borrow),
                                   t.network) for t in spec.tenants})


def load_tenants(path: str | Path) -> Tenants:
    return parse_tenants(read_document(path, "`tenants:`"), str(path))


def tenant_entry(t: Tenant) -> dict[str, Any]:
    """A tenant as a spec entry (what `parse_tenants` reads back to the same tenant)."""
    out: dict[str, Any] = {"name": t.name, "weight": t.weight}
    if t.cohort is not None:
        out["cohort"] = t.cohort
    if t.unix_user is not None:
        out["unix_user"] = t.unix_user
    if t.network is not None:
        out["network"] = t.network
    if t.quota:
        out["quota"] = dict(t.quota)
    if t.borrow:
        out["borrow"] = dict(t.borrow)
    return out


def merge_tenants(base: Tenants, overrides: Mapping[str, Mapping[str, Any]], source: str = "tenants") -> Tenants:
    """`base` with each tenant that `overrides` names replaced by its entry there (an admin's changes),
    checked as a whole spec (SpecError names the tenant and the field)."""
    if not overrides:
        return base
    entries = [tenant_entry(t) for name, t in base.by_name.items() if name not in overrides]
    entries += [{**dict(entry), "name": name} for name, entry in sorted(overrides.items())]
    return parse_tenants(entries, source)


def _given(limits: Limits) -> dict[str, float]:
    return {k: float(v) for k, v in limits.model_dump().items() if v is not None}


__all__ = ["RESERVED_NAMES", "RESOURCES", "TENANT_NAME", "Limits", "Tenant", "TenantSpec", "Tenants", "canonical_name",
           "load_tenants", "merge_tenants", "parse_tenants", "tenant_entry", "tenant_name_clash", "tenant_name_problem"]
