"""`drmaestro`: the seed's multi-phase min-cost flow; devices may be remote; network load ignored."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from disagg.model import Cluster, Job
from disagg.placement.base import Clock, FairTerms, no_clock
from disagg.placement.decisions import Decisions
from disagg.placement.flow import FlowOptions, FlowPlacer
from disagg.placement.network import FlowNetwork


class DRMaestroPolicy:
    """DRMaestro: multi-phase min-cost flow; remote devices allowed; blind to network load."""

    name = "drmaestro"
    options = FlowOptions(name="drmaestro", cost_model="drmaestro")
    #: W is read off a `WaitingQueue`'s `wait_rounds` for the jobs a round admits (placement/base.py).
    reads_waiting_queue = True

    def __init__(self) -> None:
        self._placer = FlowPlacer(self.options)

    def keep_graphs(self) -> list[tuple[str, FlowNetwork, NDArray[np.int64]]]:
        """From now on, keep every solved network (for `disagg place --dump-graphs`); returns the list."""
        self._placer.graphs = []
        return self._placer.graphs

    def place(self, snapshot: Cluster, queue: Sequence[Job], now: float, rng: np.random.Generator,
              clock: Clock = no_clock, terms: FairTerms | None = None) -> Decisions:
        """Deterministic: `rng` is unused (min-cost flow has no random choices)."""
        return self._placer.place(snapshot, queue, now, clock, terms)


class DRMaestroNAPolicy(DRMaestroPolicy):
    """DRMaestro NA: prices link load into φ and postpones placements that would miss the SLO."""

    name = "drmaestro-na"
    options = FlowOptions(name="drmaestro-na", cost_model="drmaestro-na")
