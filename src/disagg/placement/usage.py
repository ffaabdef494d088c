"""What tenants hold and have held: usage per resource, the cluster's capacity, dominant shares.

Resources are those of a tenants spec (`model.tenants.RESOURCES`): `cpus`, `memory_gb`,
`network_gbps` and the device kinds. A device counts as one of its kind wherever it sits: a remote
GPU is a GPU. A remote device also reserves bandwidth on its path, and that bandwidth counts
against `network_gbps` (an allocation's `network_gbps` is the sum over its remote devices).

Decayed usage (`decay`) is an exponentially weighted average of usage over time with a half-life,
Slurm's PriorityDecayHalfLife: usage `h` seconds ago weighs half as much as usage now. Fair share is
a tenant's dominant share (DRF: the largest of its shares of each resource) over that average,
divided by its weight. Pure: the shell keeps the history and passes it in.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Protocol

import numpy as np

from disagg.model import Cluster, Job
from disagg.model.states import DEVICE_HEALTHY
from disagg.model.tenancy import Holder
from disagg.model.tenants import RESOURCES
from disagg.placement.decisions import JobPlacement
from disagg.placement.state import column

Usage = dict[str, float]


def add(into: Usage, more: Mapping[str, float], sign: float = 1.0) -> Usage:
    """Add `more` (times `sign`) into `into`, in place; returns `into`."""
    for r, v in more.items():
        if v:
            into[r] = into.get(r, 0.0) + sign * v
    return into


def request_usage(job: Job) -> Usage:
    """What a queued job will hold once placed, as far as its request says: its cpus, memory and
    devices of each kind. Its network use depends on where its devices land, so it is not counted
    here (zero: a placement with local devices only draws none)."""
    t = job.tasks
    out: Usage = {"cpus": t.count * t.cpus, "memory_gb": t.count * t.memory_gb}
    for kind, n in t.devices.items():
        if n > 0:
            out[kind] = float(n * t.count)
    return out


class _Device(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def remote(self) -> bool: ...
    @property
    def network_gbps(self) -> float: ...


class _Task(Protocol):
    @property
    def cpus(self) -> float: ...
    @property
    def memory_gb(self) -> float: ...
    @property
    def devices(self) -> Sequence[_Device]: ...


class _Placed(Protocol):
    @property
    def tasks(self) -> Sequence[_Task]: ...


def placement_usage(p: JobPlacement | _Placed, into: Usage | None = None) -> Usage:
    """What a placement holds — a round's `JobPlacement` or a live slice's `SlicePlacement`: its tasks'
    cpus and memory, its devices by kind, its remote devices' bandwidth (added to `into`, when given)."""
    out: Usage = into if into is not None else {}
    out.setdefault("cpus", 0.0)
    out.setdefault("memory_gb", 0.0)
    for t in p.tasks:
        out["cpus"] += t.cpus
        out["memory_gb"] += t.memory_gb
        for g in t.devices:
            out[g.kind] = out.get(g.kind, 0.0) + 1.0
            if g.remote and g.network_gbps > 0:
                out["network_gbps"] = out.get("network_gbps", 0.0) + g.network_gbps
    return out


def held_by_job(cluster: Cluster, holders: Mapping[str, Holder]) -> dict[str, Usage]:
    """What each attributed running job holds now, from the snapshot's allocations (one per task).
    Allocations of jobs no holder names (warm-up scaffolding, another system's jobs) count for no one."""
    out: dict[str, Usage] = {}
    kind_of: dict[str, str] | None = None
    for a in cluster.allocations:
        if a.job not in holders:
            continue
        u = out.get(a.job)
        if u is None:
            u = out[a.job] = {"cpus": 0.0, "memory_gb": 0.0}
        u["cpus"] += a.cpus
        u["memory_gb"] += a.memory_gb
        if a.network_gbps:
            u["network_gbps"] = u.get("network_gbps", 0.0) + a.network_gbps
        if a.devices:
            if kind_of is None:
                kind_of = {d.id: d.kind for d in cluster.devices}
            for d in a.devices:
                kind = kind_of.get(d)
                if kind is not None:
                    u[kind] = u.get(kind, 0.0) + 1.0
    return out


def tenant_usage(cluster: Cluster, holders: Mapping[str, Holder]) -> dict[str, Usage]:
    """What each tenant holds now (`by_tenant(held_by_job(...))`, summed as columns: a round at 12,500
    machines has thousands of allocations)."""
    allocations = cluster.allocations
    owner = [None if h is None else h.tenant for h in map(holders.get, map(attrgetter("job"), allocations))]
    names = sorted({o for o in owner if o is not None})
    if not names:
        return {}
    code = {n: i for i, n in enumerate(names)}
    at = np.fromiter((-1 if o is None else code[o] for o in owner), dtype=np.int64, count=len(owner))
    mine = at >= 0
    out: dict[str, Usage] = {n: {} for n in names}
    for r in ("cpus", "memory_gb", "network_gbps"):
        sums = np.bincount(at[mine], weights=column(allocations, r)[mine], minlength=len(names)).tolist()
        for n, v in zip(names, sums, strict=True):
            if v or r != "network_gbps":
                out[n][r] = v
    kind_of: dict[str, str] | None = None
    for i in np.nonzero(mine)[0].tolist():
        a = allocations[i]
        if a.devices:
            kind_of = kind_of if kind_of is not None else {d.id: d.kind for d in cluster.devices}
            u = out[owner[i]]  # type: ignore[index]
            for d in a.devices:
                kind = kind_of.get(d)
                if kind is not None:
                    u[kind] = u.get(kind, 0.0) + 1.0
    return out


def by_tenant(per_job: Mapping[str, Usage], holders: Mapping[str, Holder]) -> dict[str, Usage]:
    """Jobs' usage summed per tenant."""
    out: dict[str, Usage] = {}
    for job, u in per_job.items():
        add(out.setdefault(holders[job].tenant, {}), u)
    return out


def capacity(cluster: Cluster) -> Usage:
    """What the cluster has of each resource (its healthy devices; network: the machines' uplinks,
    the bandwidth its machines can draw): the denominators of shares."""
    out: Usage = {"cpus": sum(map(attrgetter("cpus"), cluster.machines)),
                  "memory_gb": sum(map(attrgetter("memory_gb"), cluster.machines)),
                  "network_gbps": sum(map(attrgetter("uplink_gbps"), cluster.machines))}
    devices = cluster.devices
    healthy = (devices if set(map(attrgetter("health"), devices)) <= {DEVICE_HEALTHY} else
               [d for d in devices if d.health == DEVICE_HEALTHY])
    out.update({k: float(n) for k, n in Counter(map(attrgetter("kind"), healthy)).items()})
    return out


def dominant_share(usage: Mapping[str, float], cap: Mapping[str, float]) -> float:
    """DRF's dominant share: the largest share of any resource the cluster has."""
    return max((usage.get(r, 0.0) / cap[r] for r in RESOURCES if cap.get(r, 0.0) > 0), default=0.0)


def decay(history: Mapping[str, Mapping[str, float]], current: Mapping[str, Mapping[str, float]], dt_s: float,
          half_life_s: float) -> dict[str, Usage]:
    """The decayed usage after `dt_s` more seconds during which each tenant held `current`: each
    tenant's average moves towards its current usage by 1 − 2^(−dt/h). A tenant with neither history
    nor usage is left out; one whose average has decayed below a millionth of a unit is dropped."""
    if half_life_s <= 0:
        return {t: dict(u) for t, u in current.items()}
    keep = math.pow(2.0, -max(dt_s, 0.0) / half_life_s)
    out: dict[str, Usage] = {}
    for tenant in set(history) | set(current):
        before, now = history.get(tenant, {}), current.get(tenant, {})
        mixed = {r: keep * before.get(r, 0.0) + (1.0 - keep) * now.get(r, 0.0) for r in set(before) | set(now)}
        mixed = {r: v for r, v in mixed.items() if v > 1e-6}
        if mixed:
            out[tenant] = mixed
    return out


def total(usages: Iterable[Mapping[str, float]]) -> Usage:
    out: Usage = {}
    for u in usages:
        add(out, u)
    return out


__all__ = ["Usage", "add", "by_tenant", "capacity", "decay", "dominant_share", "held_by_job", "placement_usage",
           "request_usage", "tenant_usage", "total"]
