"""The policy interface: a pure function of (snapshot, queue, now, rng) → Decisions.

`stopwatch` is how the shell lends a clock for the timings; the core never reads one itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from disagg.model import Cluster, Job
from disagg.placement.decisions import Decisions

Clock = Callable[[], float]


def no_clock() -> float:
    """The default clock of the pure core: time does not pass, timings come out as zero."""
    return 0.0


class Policy(Protocol):
    """Decides where queued jobs go. Pure: no I/O, no clock (timings use the `clock` lent to it)."""

    name: str

    def place(
        self,
        snapshot: Cluster,
        queue: Sequence[Job],
        now: float,
        rng: np.random.Generator,
        clock: Clock = no_clock,
    ) -> Decisions: ...


PolicyFactory = Callable[[], Policy]
