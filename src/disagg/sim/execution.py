"""The execution-time model: how long a task runs given where its devices are and who it shares with.

A task's *work* is its base time — the seconds it takes with local devices on an idle network and a
machine of its own. While it runs it progresses at rate `1 / stretch`, and the engine re-evaluates the
stretch whenever a task starts or finishes on a machine or a link it shares. The stretch multiplies
four independent effects (docs/simulator.md states them with their sources):

1. remote devices (DRMaestro profile): the transfer share `ts` of the time stretches by the profile's
   `remote_factor`, scaled by how much slower the path is than the reference 10 Gb/s the profiles were
   measured on;
2. network load (the NA model): a remote device's transfer part stretches by `1 + sensitivity · load`,
   `load` being the busiest link's use by *other* traffic (0..1) on the device's path;
3. collocation: `1 + κ · (share of the machine's CPUs used by other tasks)`;
4. remote memory (LegoOS): `1 + a · (1 − c)^b`, `c` the local cache share of the working set, fitted
   to LegoOS's 1.7x at 128 MB and 1.3x at 512 MB ExCache for a 0.9 GB working set;
5. a shared PCIe link (issue 14): GPUs on one board share the board's host link (a Tesla K80 is two
   GK210 GPUs behind one PCIe Gen3 x16 link); a local device's transfer part stretches by
   `1 + (time share the sibling's other job moves data over that link)`.

Everything here is a pure function of numbers, so tests can check each effect alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from disagg.profiles import Profile

#: Bandwidth the profiles' `remote_factor` was measured at (the seed's testbed 10 GbE NIC).
REFERENCE_GBPS = 10.0
#: Collocation penalty at a fully used machine (5%): Rodinia kernels are GPU-bound, host work is small.
COLLOCATION_KAPPA = 0.05

#: GPUs that share one PCIe host link, by model. NVIDIA Tesla K80 board specification (BD-07317-001_v05,
#: January 2015): the board carries two GK210 GPUs behind an on-board PCIe switch and one PCI Express
#: Gen3 x16 system interface. The seed's Firestone servers hold K80s (seed 001, "Testing environment").
#: Models not listed have a link of their own. Devices of a shared model pair up by index (0-1, 2-3, …).
GPUS_PER_PCIE_LINK: dict[str, int] = {"K80": 2}
#: What share of a PCIe Gen3 x16 link a remote device's transfers can use: its data arrive over the
#: 10 Gb/s reference network (1.25 GB/s), against the link's 15.75 GB/s per direction (8 GT/s per lane,
#: 128b/130b encoding, 16 lanes: PCI Express Base Specification 3.0): about 8%.
REMOTE_PCIE_SHARE = (REFERENCE_GBPS / 8.0) / 15.75

#: LegoOS anchor points (seed 002, "Performance Evaluation"): TensorFlow CIFAR-10, 0.9 GB working set,
#: slowdown 1.7x with a 128 MB ExCache and 1.3x with 512 MB.
LEGOOS_WORKING_SET_MB = 0.9 * 1024
LEGOOS_ANCHORS: tuple[tuple[float, float], tuple[float, float]] = ((128.0, 1.7), (512.0, 1.3))


def _fit_legoos() -> tuple[float, float]:
    """Fit `s(c) = 1 + a·(1 − c)^b` exactly through the two anchors; returns (a, b).

    The form is chosen because it is 1 when the whole working set is cached (c = 1), grows as the cache
    shrinks, and two parameters pass through both reported points. ln(s−1) = ln a + b·ln(1−c) is linear,
    so two points fix it.
    """
    (mb1, s1), (mb2, s2) = LEGOOS_ANCHORS
    u1 = 1.0 - mb1 / LEGOOS_WORKING_SET_MB
    u2 = 1.0 - mb2 / LEGOOS_WORKING_SET_MB
    b = math.log((s1 - 1.0) / (s2 - 1.0)) / math.log(u1 / u2)
    a = (s1 - 1.0) / u1**b
    return a, b


LEGOOS_A, LEGOOS_B = _fit_legoos()


def memory_slowdown(cache_share: float) -> float:
    """LegoOS-style slowdown of a task whose memory is remote, given the share of its working set cached
    locally (ExCache). 1.0 when everything is local; `1 + a` when nothing is."""
    c = min(max(cache_share, 0.0), 1.0)
    return 1.0 + LEGOOS_A * float((1.0 - c) ** LEGOOS_B)


def path_factor(profile: Profile, bottleneck_gbps: float, reference_gbps: float = REFERENCE_GBPS) -> float:
    """How much a remote device's transfer part stretches on an idle path of `bottleneck_gbps`.

    The profile's `remote_factor` holds at the reference bandwidth; a slower path stretches the extra
    part proportionally, a faster one shrinks it, never below local speed (1.0).
    """
    extra = (profile.remote_factor - 1.0) * reference_gbps / max(bottleneck_gbps, 1e-9)
    return max(1.0, 1.0 + extra)


def link_load_factor(profile: Profile, load: float) -> float:
    """The NA model: a remote transfer part stretches by `1 + sensitivity · load`, load capped to 0..1."""
    return 1.0 + profile.load_sensitivity * min(max(load, 0.0), 1.0)


def pcie_factor(others_share: float) -> float:
    """A local device's transfer part when other jobs use its PCIe link `others_share` of the time (their
    transfer shares; a remote user's times REMOTE_PCIE_SHARE): two transfers at once each get half the
    link, so the overlapping part takes twice as long; assuming the jobs' transfers fall independently
    in time, the expected stretch is `1 + others_share` (at most 2: a K80's link has one other GPU)."""
    return 1.0 + min(max(others_share, 0.0), 1.0)


def collocation_factor(others_cpu_share: float, kappa: float = COLLOCATION_KAPPA) -> float:
    """Slowdown from sharing a machine: `others_cpu_share` is the share of its CPUs other tasks hold."""
    return 1.0 + kappa * min(max(others_cpu_share, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """One transfer-bearing device of a task as the model sees it: local, or remote over a path.

    `bottleneck_gbps` is the slowest link of the path; `load` the busiest link's use by other traffic;
    `pcie` (local devices) the share of time other jobs move data over the device's PCIe link.
    """

    remote: bool
    bottleneck_gbps: float = REFERENCE_GBPS
    load: float = 0.0
    pcie: float = 0.0


class DeviceView(Protocol):
    """What the model reads of a device a task uses: a `DeviceUse`, or the simulator's record of a grant
    (which keeps its path's bottleneck and updates its load as the network changes)."""

    @property
    def remote(self) -> bool: ...

    @property
    def bottleneck_gbps(self) -> float: ...

    @property
    def load(self) -> float: ...

    @property
    def pcie(self) -> float: ...


def transfer_stretch(profile: Profile, devices: Sequence[DeviceView]) -> float:
    """Stretch from where a task's devices sit: `(1 − ts) + ts · mean_d(f_d)`.

    `f_d` is `1 + pcie` for a local device (`pcie_factor`: others' use of its PCIe link) and
    `path_factor · link_load_factor` for a remote one (its transfers are bound by the network, not the
    PCIe link). With no devices
    the task has no transfer part to stretch. For one remote device on the reference path this is
    exactly `profiles.expected_s(...) / base_s`, so the policies' φ and the simulator agree when the
    network is as the policy saw it.
    """
    ts = profile.transfer_share
    if not devices or ts <= 0.0:
        return 1.0
    total = 0.0
    for d in devices:
        if d.remote:
            total += path_factor(profile, d.bottleneck_gbps) * link_load_factor(profile, d.load)
        else:
            total += pcie_factor(d.pcie)
    return (1.0 - ts) + ts * total / len(devices)


def task_stretch(
    profile: Profile,
    devices: Sequence[DeviceView],
    others_cpu_share: float = 0.0,
    memory_cache_share: float | None = None,
) -> float:
    """The full stretch of one task: transfer × collocation × remote memory (None = no remote memory)."""
    stretch = transfer_stretch(profile, devices) * collocation_factor(others_cpu_share)
    if memory_cache_share is not None:
        stretch *= memory_slowdown(memory_cache_share)
    return stretch


def sample_base_s(profile: Profile, rng_normal: float, cv: float = 0.05) -> float:
    """A job's base time drawn around its profile's: lognormal with coefficient of variation `cv`.

    `rng_normal` is a standard normal draw supplied by the caller (so the caller owns the random stream).
    An unknown profile has no base time of its own; callers give those jobs a duration from the trace.
    """
    sigma = math.sqrt(math.log1p(cv * cv))
    mu = -0.5 * sigma * sigma  # mean of the lognormal factor is exactly 1
    return profile.base_s * math.exp(mu + sigma * rng_normal)
