"""`random-remote`: local devices first, else random remote ones (the Slurm "rgpu" extension's way)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from disagg.placement.decisions import DeviceGrant
from disagg.placement.sequential import (
    Ask,
    SequentialPolicy,
    by_submit,
    cpu_fit_mask,
    first_fits,
    local_fit_mask,
    no_machine,
    short_of_devices,
    spare_first,
    take_local,
    take_remote_from,
)
from disagg.placement.state import FreeState


def _prefer_local(state: FreeState, ask: Ask, rng: np.random.Generator) -> Iterator[int]:
    """The first machine that holds the task's devices; else those with cpu and memory that could serve
    the whole task remotely (all its devices and their summed bandwidth), in inventory order: the
    random draw of remote devices is then only among machines that can take the whole task."""
    fits = cpu_fit_mask(state, ask)
    if not fits.any():
        raise no_machine(state, ask)
    local = fits & local_fit_mask(state, ask)
    if local.any() and not ask.careful:
        return iter([int(np.argmax(local))])
    return first_fits(state, ask, fits)


def _local_then_random(state: FreeState, ask: Ask, m: int, kind: str, n: int,
                       rng: np.random.Generator) -> list[DeviceGrant]:
    got = take_local(state, ask, m, kind, n)
    while len(got) < n:
        # Only where a device is free and every link of the path can carry one more.
        candidates = np.nonzero((state.free_count[kind] > 0) & state.remote_reach(m, ask.gbps))[0]
        grant = None
        drawn = rng.permutation(candidates)
        for loc in spare_first(state, ask, kind, drawn):
            grant = take_remote_from(state, ask, m, kind, int(loc))
            if grant is not None:
                break
        if grant is None:
            raise short_of_devices(state, ask, m, kind, n, len(got))
        got.append(grant)
    return got


class RandomRemotePolicy(SequentialPolicy):
    """Random-remote: local devices first, else random remote ones (Slurm rgpu); queue in submit order."""

    name = "random-remote"
    order = staticmethod(by_submit)
    pick_machine = staticmethod(_prefer_local)
    pick_devices = staticmethod(_local_then_random)
