"""Allocation: what a machine or a pool has, and how much of it the live slices hold (pure).

The operator's check of the scheduler (`sinfo -O cpusstate,gres,gresused`): per machine, cpus and
memory allocated / total (the slice machines on it); per machine and pool, devices by kind and model,
used (attached to a slice) / total, and how many of them cannot be offered (failed, drained, or behind
a link that is down). The same numbers, summed, are the cluster's capacity (`capacity`). The store's
machines view, the API (`GET /v1/machines`), `disagg machines` and the dashboard all show these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from disagg.model.states import DeviceState


class DeviceLike(Protocol):
    kind: str
    model: str


def node_allocation(cpus: float, memory_gb: float, held: Iterable[tuple[float, float]],
                    devices: Iterable[tuple[DeviceLike, DeviceState, bool]]) -> dict[str, Any]:
    """A node's allocation: `cpus` and `memory_gb` its totals, `held` the (cpus, memory GB) of each slice
    machine on it, `devices` each of its devices with its state and whether it is reachable."""
    used_cpus = used_mem = 0.0
    for c, m in held:
        used_cpus += c
        used_mem += m
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for d, state, reachable in devices:
        g = groups.setdefault((d.kind, d.model), {"kind": d.kind, "model": d.model, "used": 0, "total": 0,
                                                   "unavailable": 0})
        g["total"] += 1
        if state == DeviceState.ATTACHED:
            g["used"] += 1
        elif state != DeviceState.FREE or not reachable:
            g["unavailable"] += 1
    return {"cpus": {"allocated": round(used_cpus, 6), "total": cpus},
            "memory_gb": {"allocated": round(used_mem, 6), "total": memory_gb},
            "devices": [groups[k] for k in sorted(groups)]}


def capacity(allocations: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The cluster's capacity from its nodes' allocations: cpus and memory allocated / total, and devices
    by kind and model used / total (what the queue page's header shows)."""
    out: dict[str, Any] = {"cpus": {"allocated": 0.0, "total": 0.0}, "memory_gb": {"allocated": 0.0, "total": 0.0}}
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for a in allocations:
        for r in ("cpus", "memory_gb"):
            out[r]["allocated"] += a[r]["allocated"]
            out[r]["total"] += a[r]["total"]
        for g in a["devices"]:
            mine = groups.setdefault((g["kind"], g["model"]), {**g, "used": 0, "total": 0, "unavailable": 0})
            for k in ("used", "total", "unavailable"):
                mine[k] += g[k]
    for r in ("cpus", "memory_gb"):
        out[r] = {k: round(v, 6) for k, v in out[r].items()}
    out["devices"] = [groups[k] for k in sorted(groups)]
    return out


__all__ = ["capacity", "node_allocation"]
