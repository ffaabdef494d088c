"""A finished slice as an observation of its image: run time, remote share, and the load its remote
paths carried meanwhile, from the history's link samples. Pure: the store hands the numbers in."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

from disagg.model.slices import SlicePlacement
from disagg.profiles.learn import Observation
from disagg.profiles.model import Profile, expected_s


def remote_share(placement: SlicePlacement) -> float:
    """The share of the job's devices that were remote (0 for a job without devices)."""
    devices = [d for t in placement.tasks for d in t.devices]
    return sum(d.remote for d in devices) / len(devices) if devices else 0.0


def path_load(placement: SlicePlacement, samples: Sequence[tuple[float, Mapping[str, float]]],
              caps: Mapping[str, float], pace: Callable[[float], float] | None = None) -> float:
    """The mean over the samples of the busiest link on the job's remote paths, as used by *others*
    (the sample's load less what this job reserved there, over the link's capacity, 0..1): the load
    φ's `load` means. 0 without samples (a run shorter than the sampling interval) or remote devices.

    `pace`: φ at a load, as the image's current estimate says. Each sample then counts by the work the
    job did while it held (1/φ), not by time: a run's time is its work spread over φ, so the load whose
    φ explains the whole run is the work-weighted mean. A time mean over a varying load is higher than
    that (the job did little work while the load was high), and the fit would take the load term for
    smaller than it is."""
    own: dict[str, float] = {}
    for t in placement.tasks:
        for d in t.devices:
            if d.remote:
                for link in d.path:
                    own[link] = own.get(link, 0.0) + d.network_gbps
    if not own or not samples:
        return 0.0
    total = weights = 0.0
    for _, load in samples:
        busiest = 0.0
        for link, mine in own.items():
            cap = caps.get(link, 0.0)
            if cap > 0:
                busiest = max(busiest, (float(load.get(link, 0.0)) - mine) / cap)
        busiest = min(max(busiest, 0.0), 1.0)
        weight = 1.0 if pace is None else 1.0 / max(pace(busiest), 1e-9)
        total += weight * busiest
        weights += weight
    return total / weights


def observation(placement: SlicePlacement, started: float | None, ended: float | None,
                samples: Sequence[tuple[float, Mapping[str, float]]], caps: Mapping[str, float],
                profile: Profile | None = None) -> Observation | None:
    """The slice's run as an observation, or None when its run cannot be timed. `profile`: the image's
    current estimate, to weigh the load samples by the work done in each (`path_load`)."""
    if started is None or ended is None or ended <= started:
        return None
    share = remote_share(placement)
    pace = None if profile is None or not profile.known else partial(expected_s, profile, share)
    return Observation(ended - started, share, path_load(placement, samples, caps, pace))
