"""A finished slice as an observation of its image: run time, remote share, and the load its remote
paths carried meanwhile, from the history's link samples. Pure: the store hands the numbers in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from disagg.model.slices import SlicePlacement
from disagg.profiles.learn import Observation


def remote_share(placement: SlicePlacement) -> float:
    """The share of the job's devices that were remote (0 for a job without devices)."""
    devices = [d for t in placement.tasks for d in t.devices]
    return sum(d.remote for d in devices) / len(devices) if devices else 0.0


def path_load(placement: SlicePlacement, samples: Sequence[tuple[float, Mapping[str, float]]],
              caps: Mapping[str, float]) -> float:
    """The mean over the samples of the busiest link on the job's remote paths, as used by *others*
    (the sample's load less what this job reserved there, over the link's capacity, 0..1): the load
    φ's `load` means. 0 without samples (a run shorter than the sampling interval) or remote devices."""
    own: dict[str, float] = {}
    for t in placement.tasks:
        for d in t.devices:
            if d.remote:
                for link in d.path:
                    own[link] = own.get(link, 0.0) + d.network_gbps
    if not own or not samples:
        return 0.0
    total = 0.0
    for _, load in samples:
        busiest = 0.0
        for link, mine in own.items():
            cap = caps.get(link, 0.0)
            if cap > 0:
                busiest = max(busiest, (float(load.get(link, 0.0)) - mine) / cap)
        total += min(max(busiest, 0.0), 1.0)
    return total / len(samples)


def observation(placement: SlicePlacement, started: float | None, ended: float | None,
                samples: Sequence[tuple[float, Mapping[str, float]]], caps: Mapping[str, float]
                ) -> Observation | None:
    """The slice's run as an observation, or None when its run cannot be timed."""
    if started is None or ended is None or ended <= started:
        return None
    return Observation(ended - started, remote_share(placement), path_load(placement, samples, caps))
