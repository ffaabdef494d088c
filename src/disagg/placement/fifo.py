"""`fifo`: FlowOS-RM's order — first in, first out, first fit, head-of-line blocking."""

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
    no_machine,
    short_of_devices,
    spare_first,
    take_local,
    take_remote_from,
)
from disagg.placement.state import FreeState


def _first_fit(state: FreeState, ask: Ask, rng: np.random.Generator) -> Iterator[int]:
    """The machines with the cpus and memory that could serve the task's whole ask (all its devices and
    their summed bandwidth), in inventory order."""
    fits = cpu_fit_mask(state, ask)
    if not fits.any():
        raise no_machine(state, ask)
    return first_fits(state, ask, fits)


def _first_fit_devices(state: FreeState, ask: Ask, m: int, kind: str, n: int,
                       rng: np.random.Generator) -> list[DeviceGrant]:
    """Local ones first, then the pool in inventory order (pools before other machines)."""
    got = take_local(state, ask, m, kind, n)
    n_machines = state.n_machines
    order = spare_first(state, ask, kind, np.r_[np.arange(n_machines, len(state.loc_rack)), np.arange(n_machines)])
    for loc in order.tolist():
        while len(got) < n and loc != m and state.free_count[kind][loc] > 0:
            grant = take_remote_from(state, ask, m, kind, loc)
            if grant is None:
                break
            got.append(grant)
        if len(got) == n:
            return got
    if len(got) < n:
        raise short_of_devices(state, ask, m, kind, n, len(got))
    return got


class FifoPolicy(SequentialPolicy):
    """FIFO: FlowOS-RM's order — first in, first out, first fit; a job that waits blocks those behind it."""

    name = "fifo"
    order = staticmethod(by_submit)
    pick_machine = staticmethod(_first_fit)
    pick_devices = staticmethod(_first_fit_devices)
    blocking = True
