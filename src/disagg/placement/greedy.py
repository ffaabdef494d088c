"""`greedy`: Kubernetes-like filter + score (least-allocated), server-centric devices."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from disagg.model import Job
from disagg.placement.decisions import DeviceGrant, Reason
from disagg.placement.sequential import (
    Ask,
    Refused,
    SequentialPolicy,
    cpu_fit_mask,
    local_fit_mask,
    no_machine,
    take_local,
)
from disagg.placement.state import FreeState


def _by_priority(queue: Sequence[Job], now: float) -> list[Job]:
    """Kubernetes' queue: higher priority first (importance 1 is highest), then oldest."""
    return sorted(queue, key=lambda j: (j.importance, j.submit_s, j.name))


def _least_allocated(state: FreeState, ask: Ask, rng: np.random.Generator) -> Iterator[int]:
    t = ask.job.tasks
    # Filter: cpu and memory fit, and the machine holds the task's devices itself.
    fits = cpu_fit_mask(state, ask)
    if not fits.any():
        raise no_machine(state, ask)
    feasible = fits & local_fit_mask(state, ask)
    if not feasible.any():
        wants = ", ".join(f"{t.wants(k)} {_what(k, t.models.get(k))}" for k in t.kinds)
        most = ", ".join(f"{int(state.local_free(k, t.models.get(k))[fits].max(initial=0))} {k}" for k in t.kinds)
        raise Refused(Reason.NO_DEVICES, f"needs {wants} on one machine with {t.cpus:g} cpus free; no such "
                                         f"machine has them all (most on any one of them: {most})", lasting=True)
    # Score: least allocated after placing (mean of free cpu and memory shares); select: the highest.
    score = ((state.cpu - t.cpus) / state.cpu_total + (state.mem - t.memory_gb) / state.mem_total) / 2
    score = np.where(feasible, score, -np.inf)
    # Its devices are local and free, so the chosen machine serves the task: no other to try.
    return iter([int(np.argmax(score))])


def _what(kind: str, model: str | None) -> str:
    return f"{kind} ({model})" if model else kind


def _local_only(state: FreeState, ask: Ask, m: int, kind: str, n: int, rng: np.random.Generator) -> list[DeviceGrant]:
    got = take_local(state, ask, m, kind, n)
    if len(got) < n:
        raise Refused(Reason.NO_DEVICES, f"needs {n} {kind} on {state.cluster.locations[m]}, {len(got)} free "
                                         f"of the model asked for")
    return got


class GreedyPolicy(SequentialPolicy):
    """Greedy: Kubernetes-like filter + score (least-allocated); devices only from the task's machine."""

    name = "greedy"
    order = staticmethod(_by_priority)
    pick_machine = staticmethod(_least_allocated)
    pick_devices = staticmethod(_local_only)
    server_centric = True
