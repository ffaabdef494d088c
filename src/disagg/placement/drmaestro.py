"""`drmaestro`: the seed's multi-phase min-cost flow; devices may be remote; network load ignored."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

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

    def __init__(self, max_iterations: int | None = None) -> None:
        """`max_iterations`: how many passes of its phases a round may make (None: the policy's own,
        `FlowOptions.max_iterations`); fewer is a trade an experiment can measure (docs/benchmarks.md:
        the later passes cost a third of a simulated run and place what the next round would)."""
        if max_iterations is not None:
            if max_iterations < 1:
                raise ValueError(f"max_iterations: {max_iterations} is not allowed; a round makes at least 1 pass")
            self.options = replace(self.options, max_iterations=max_iterations)
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
