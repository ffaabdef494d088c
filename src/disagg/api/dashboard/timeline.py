"""The "over time" page's numbers, from the controller's samples as they were taken (pure).

Counts (jobs queued and running, devices in use and in all) are whole things: a bucket shows the largest
count any of its samples had, never a mean that would read "2.5 jobs". Rates and times (rounds per
minute, round time, link load in Gbit/s) are means. Every sample says how many devices have failed and
how many links are down: where that number rises the charts mark a fault, where it falls a repair.
The window the page opens with is the smallest that holds every sample kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Sample = tuple[float, Mapping[str, Any]]
#: Counts: a bucket's largest value.
COUNTS = ("queue_length", "jobs_running")
COUNT_MAPS = ("devices_in_use", "devices_total")
#: Rates and times: a bucket's mean.
MEANS = ("rounds_per_min", "round_s", "link_utilisation_max")
MEAN_MAPS = ("link_load_gbps",)


def buckets(samples: Sequence[Sample], start: float, step: float) -> list[dict[str, Any]]:
    """The samples in buckets of `step` seconds from `start` (empty ones left out), counts by their
    largest value and the rest by their mean."""
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for at, data in samples:
        if at >= start:
            groups.setdefault(int((at - start) // step), []).append(data)
    out = []
    for index in sorted(groups):
        group = groups[index]
        point: dict[str, Any] = {"at": start + index * step, "samples": len(group)}
        for key in COUNTS:
            values = [d[key] for d in group if d.get(key) is not None]
            point[key] = max(values) if values else None
        for key in MEANS:
            values = [float(d[key]) for d in group if d.get(key) is not None]
            point[key] = sum(values) / len(values) if values else None
        for key in COUNT_MAPS:
            names = {n for d in group for n in d.get(key, {})}
            point[key] = {n: max(int(d.get(key, {}).get(n, 0)) for d in group) for n in sorted(names)}
        for key in MEAN_MAPS:
            names = {n for d in group for n in d.get(key, {})}
            point[key] = {n: sum(float(d.get(key, {}).get(n, 0.0)) for d in group) / len(group)
                          for n in sorted(names)}
        out.append(point)
    return out


def _broken(data: Mapping[str, Any]) -> int:
    return int(sum(data.get("devices_failed", {}).values())) + int(data.get("links_down", 0))


def marks(samples: Sequence[Sample]) -> list[tuple[float, str]]:
    """(time, "fault" | "repair" | "failover"): where the failed devices and down links, counted together,
    rose or fell from one sample to the next, and where the lease's epoch rose (another replica, or a
    restarted controller, took over). Samples of an older controller, without those numbers, mark nothing."""
    out: list[tuple[float, str]] = []
    before: int | None = None
    epoch: int | None = None
    for at, data in samples:
        now_epoch = data.get("epoch")
        if isinstance(now_epoch, int):
            if epoch is not None and now_epoch > epoch:
                out.append((at, "failover"))
            epoch = now_epoch
        if "links_down" not in data:
            before = None
            continue
        now = _broken(data)
        if before is not None and now != before:
            out.append((at, "fault" if now > before else "repair"))
        before = now
    return out


def fitting_window(windows: Mapping[str, float], oldest: float | None, now: float) -> str:
    """The smallest window that holds every sample from `oldest` on (the largest when none does)."""
    names = sorted(windows, key=lambda w: windows[w])
    if oldest is None:
        return names[0]
    return next((w for w in names if now - oldest <= windows[w]), names[-1])


__all__ = ["buckets", "fitting_window", "marks"]
