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
    """The load φ's `load` means for the job's run: per sample, each remote device's load — the busiest
    link of its path as used by *others* (the sample's load less what this job reserved there, over
    the link's capacity, 0..1) — averaged over the remote devices; then averaged over the samples. 0
    without samples (a run shorter than the sampling interval) or remote devices.

    Over the devices, a mean and not the busiest: a task's remote devices each stretch its transfer
    part by their own path's load (`sim.execution.transfer_stretch`), so φ(r, load) explains the run
    at their mean load. The busiest device's load read a job with two remote devices, one on a quiet
    path and one on a busy one, as run wholly at the busy load, and the fit took the load term for
    smaller than it is (examples/learning's acme/etl: 13-22% off after 20 jobs on four of 45 traces,
    docs/profiles.md, "Sixth pass").

    `pace`: φ at a load, as the image's current estimate says. Each sample then counts by the work the
    job did while it held (1/φ), not by time: a run's time is its work spread over φ, so the load whose
    φ explains the whole run is the work-weighted mean. A time mean over a varying load is higher than
    that (the job did little work while the load was high), and the fit would take the load term for
    smaller than it is."""
    remote = [d for t in placement.tasks for d in t.devices if d.remote]
    own: dict[str, float] = {}
    for d in remote:
        for link in d.path:
            own[link] = own.get(link, 0.0) + d.network_gbps
    paths = [d.path for d in remote]
    if not paths or not samples:
        return 0.0
    total = weights = 0.0
    for _, load in samples:
        mean = sum(_device_load(path, load, own, caps) for path in paths) / len(paths)
        weight = 1.0 if pace is None else 1.0 / max(pace(mean), 1e-9)
        total += weight * mean
        weights += weight
    return total / weights


def _device_load(path: Sequence[str], load: Mapping[str, float], own: Mapping[str, float],
                 caps: Mapping[str, float]) -> float:
    """One remote device's load in one sample: the busiest link of its path as used by others, 0..1."""
    busiest = 0.0
    for link in path:
        cap = caps.get(link, 0.0)
        if cap > 0:
            busiest = max(busiest, (float(load.get(link, 0.0)) - own.get(link, 0.0)) / cap)
    return min(max(busiest, 0.0), 1.0)


def observation(placement: SlicePlacement, started: float | None, ended: float | None,
                samples: Sequence[tuple[float, Mapping[str, float]]], caps: Mapping[str, float],
                profile: Profile | None = None) -> Observation | None:
    """The slice's run as an observation, or None when its run cannot be timed. `profile`: the image's
    current estimate, to weigh the load samples by the work done in each (`path_load`)."""
    if started is None or ended is None or ended <= started:
        return None
    share = remote_share(placement)
    pace = None if profile is None or not profile.known else partial(expected_s, profile, share)
    # What each remote device drew: the bandwidth the fabric carries for it (the emulated fabric carries
    # what was reserved; one with port counters would report what they measured).
    drawn = [d.network_gbps for t in placement.tasks for d in t.devices if d.remote]
    return Observation(ended - started, share, path_load(placement, samples, caps, pace), None,
                       sum(drawn) / len(drawn) if drawn else None)
