"""The profile record, the expected-completion-time model φ and the image names lookups use."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Profile:
    """What is known about a job type.

    - `base_s`: completion time with local devices and an idle network.
    - `transfer_share`: share of `base_s` spent moving data between host and device.
    - `remote_factor`: how much the transfer part stretches when the device is remote, idle network.
    - `load_sensitivity`: extra stretch of the remote transfer part per unit of link load
      (0 = idle, 1 = saturated): the transfer part takes `remote_factor * (1 + load_sensitivity * load)`.
    - `network_gbps`: average bandwidth one remote device of this job draws on its path.
    - `source`: where each number comes from, or the assumption behind it.
    """

    name: str
    base_s: float
    transfer_share: float
    remote_factor: float
    load_sensitivity: float
    network_gbps: float
    source: str = ""
    known: bool = True


#: The profile of an image we know nothing about: no transfer part, so local and remote cost the same,
#: and `base_s` is replaced by the job's SLO in `expected_s` (utility 0: the seed's "neutral cost").
NEUTRAL = Profile("unknown", 0.0, 0.0, 1.0, 0.0, 1.0, "neutral: no profile for this image", known=False)


def expected_s(profile: Profile, remote_share: float, load: float, slo_s: float | None = None) -> float:
    """φ: expected completion time when `remote_share` of the job's devices are remote under `load`.

    `load` is the fraction (0..1, capped) of the busiest link on the remote path; with several remote
    devices, the mean of their paths' (each device stretches by its own path's load, so φ is linear in
    their mean: `profiles.observe.path_load`). Pass load=0 for policies that ignore the network (plain
    DRMaestro).
    """
    base = profile.base_s if profile.known else (slo_s or 1.0)
    ts = profile.transfer_share
    load = min(max(load, 0.0), 1.0)
    remote_stretch = profile.remote_factor * (1.0 + profile.load_sensitivity * load)
    transfer = ts * ((1.0 - remote_share) + remote_share * remote_stretch)
    return base * ((1.0 - ts) + transfer)


def normalize_image(image: str) -> str:
    """`registry.io/rodinia/nw:1.0` → `nw`; `rodinia-b+tree` → `b+tree`. Lower case, no tag or digest."""
    name = image.strip().lower().split("@", 1)[0]
    name = name.rsplit("/", 1)[-1]
    name = name.split(":", 1)[0]
    for prefix in ("rodinia-", "rodinia_"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name
