"""The simulator's events (what its kernel schedules) and records (what a run produces: one `JobRecord`
per job, one `SimResult` per run). Plain values, read by the loop (engine.py) and the metrics."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import Any

# -- events --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobArrived:
    index: int


@dataclass(frozen=True, slots=True)
class RoundDue:
    pass


@dataclass(frozen=True, slots=True)
class JobFinished:
    name: str


@dataclass(frozen=True, slots=True)
class DeviceFailed:
    device: int


@dataclass(frozen=True, slots=True)
class DeviceRepaired:
    device: int


@dataclass(frozen=True, slots=True)
class PreemptDue:
    """A preempted job's grace period is over: it stops and goes back to the queue."""

    name: str


Event = JobArrived | RoundDue | JobFinished | DeviceFailed | DeviceRepaired | PreemptDue


# -- records -------------------------------------------------------------------------------------------


@dataclass(slots=True)
class JobRecord:
    """What the metrics need of one finished (or unfinished) job."""

    name: str
    image: str
    submit_s: float
    base_s: float
    slo_s: float | None
    warmup: bool
    start_s: float = math.nan
    finish_s: float = math.nan
    gpus: int = 0
    remote_gpus: int = 0
    restarts: int = 0
    tenant: str = "default"
    preempted: int = 0


@dataclass
class SimResult:
    """Everything one run produced: per-job records, series for plots, counters and timings."""

    policy: str
    records: list[JobRecord]
    latencies_s: array  # type: ignore[type-arg]
    gpu_times: array  # type: ignore[type-arg]
    gpu_in_use: array  # type: ignore[type-arg]
    total_gpus: int
    rounds: int
    conflicts: int
    sim_end_s: float
    wall_s: float
    stalled: bool
    events: int
    counters: dict[str, int] = field(default_factory=dict)
    #: Per tenant (`sim.tenants.TenantLedger.report`) and each tenant's share over time; None when the
    #: run reports no tenants.
    tenants: dict[str, Any] | None = None
    #: The jobs still waiting when the run stopped (stalled, or out of time), in queue order, each with
    #: the policy's last reason for it: the jobs this policy can never place on this cluster.
    stalled_jobs: list[tuple[str, str]] = field(default_factory=list)
    #: With `--learn`: per image, the learned estimate's error against its finished jobs (`sim.learning`).
    learning: dict[str, Any] | None = None
