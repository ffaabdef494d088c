"""Helpers for the simulator tests: small scenarios and a policy that records its rounds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from disagg.model import Cluster, Job
from disagg.placement.base import Clock, FairTerms, Policy, no_clock
from disagg.placement.decisions import Decisions
from disagg.placement.registry import get_policy
from disagg.sim.scenarios import Scenario

DATA = Path(__file__).resolve().parent / "data"


def small_scenario(machines: int = 4, jobs: int = 64, warmup_s: float = 1500.0) -> Scenario:
    """The seed's testbed and workload, smaller: half the machines CPU-starved by warm-up jobs."""
    return Scenario(f"test-{machines}m-{jobs}j", "test", machines, jobs, "uniform", warmup_s=warmup_s)


@dataclass
class Round:
    snapshot: Cluster
    queue: tuple[Job, ...]
    now: float
    decisions: Decisions


@dataclass
class RecordingPolicy:
    """Wraps a real registered policy and keeps every (snapshot, queue, now, decisions) it saw."""

    inner: Policy
    rounds: list[Round] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    def place(self, snapshot: Cluster, queue: Sequence[Job], now: float, rng: np.random.Generator,
              clock: Clock = no_clock, terms: FairTerms | None = None) -> Decisions:
        decisions = self.inner.place(snapshot, queue, now, rng, clock, terms)
        self.rounds.append(Round(snapshot, tuple(queue), now, decisions))
        return decisions


def recording(name: str) -> RecordingPolicy:
    return RecordingPolicy(get_policy(name))
