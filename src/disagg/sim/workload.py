"""Workloads: what the simulator submits and when.

A `Submission` is a job plus what only the simulator knows about it: its *work* (base seconds with
local devices on an idle network — the policy never sees this, it sees the profile) and whether it
is a warm-up job (left out of the metrics).

The generator follows the seed (001, "Trace-driven simulation configuration"): Poisson arrivals at a
given rate (16 jobs/s), the application drawn uniformly (or, as in the prototype experiments, from a
normal distribution over the eight) among the Rodinia set, and a warm-up of long CPU-only jobs that
hold 50% of the CPUs for about 2000 s. Warm-up jobs ask for a whole machine each, so they leave some
machines CPU-starved with idle GPUs — the situation where disaggregation pays off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from disagg.model import Cluster, Job, TaskRequest
from disagg.profiles import RODINIA, lookup
from disagg.sim.execution import sample_base_s

Choice = Literal["uniform", "normal"]
WARMUP_IMAGE = "warmup"


@dataclass(frozen=True, slots=True)
class Submission:
    """A job as the simulator submits it. `base_s` is its work; `warmup` keeps it out of the metrics."""

    job: Job
    base_s: float
    warmup: bool = False


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """The seed's synthetic workload. Each job is one task with `gpus` GPUs and a little host share."""

    jobs: int
    rate_per_s: float = 16.0
    choice: Choice = "uniform"
    cpus: float = 2.0
    memory_gb: float = 8.0
    gpus: int = 1
    slo_factor: float = 1.2
    base_cv: float = 0.05
    start_s: float = 1.0
    applications: tuple[str, ...] = tuple(sorted(RODINIA))


@dataclass(frozen=True, slots=True)
class WarmupSpec:
    """CPU-only jobs that hold `cpu_share` of the cluster's CPUs for about `duration_s` from t = 0."""

    cpu_share: float = 0.5
    duration_s: float = 2000.0
    jitter_s: float = 100.0
    memory_gb: float = 32.0


def pick_application(rng: np.random.Generator, choice: Choice, n: int) -> int:
    """Index of the application: uniform, or normal around the middle of the list (sd n/4), clipped."""
    if choice == "uniform":
        return int(rng.integers(n))
    return int(min(n - 1, max(0, round(rng.normal((n - 1) / 2.0, n / 4.0)))))


def poisson_workload(spec: WorkloadSpec, rng: np.random.Generator) -> list[Submission]:
    """`spec.jobs` Rodinia jobs with exponential inter-arrival times, starting at `spec.start_s`.

    The SLO of each job is its own base time times `slo_factor`: the job is expected to finish within
    that tolerance of what it would take alone with local devices (the seed's "expected completion time").
    """
    if spec.jobs < 0 or spec.rate_per_s <= 0:
        raise ValueError(f"workload needs jobs >= 0 and rate_per_s > 0, got {spec.jobs}, {spec.rate_per_s}")
    out: list[Submission] = []
    t = spec.start_s
    apps = spec.applications
    width = max(4, len(str(spec.jobs)))
    # Every job asks for the same: one (immutable) request object for all, which the policies' per-round
    # caches recognise by identity.
    request = TaskRequest(1, spec.cpus, spec.memory_gb, {"gpu": spec.gpus} if spec.gpus > 0 else {})
    for i in range(spec.jobs):
        t += float(rng.exponential(1.0 / spec.rate_per_s))
        app = apps[pick_application(rng, spec.choice, len(apps))]
        profile = lookup(app)
        base = sample_base_s(profile, float(rng.standard_normal()), spec.base_cv)
        job = Job(
            name=f"j{i:0{width}d}",
            image=f"rodinia/{app}",
            tasks=request,
            submit_s=round(t, 6),
            importance=1.0,
            slo_s=round(base * spec.slo_factor, 6),
        )
        out.append(Submission(job, base))
    return out


def warmup_jobs(cluster: Cluster, spec: WarmupSpec, rng: np.random.Generator) -> list[Submission]:
    """Whole-machine CPU-only jobs submitted at t = 0 that together ask `cpu_share` of all CPUs.

    Each asks the CPUs of the smallest machine, so any machine can take one and none can take two.
    """
    if not 0.0 <= spec.cpu_share <= 1.0:
        raise ValueError(f"warm-up cpu_share must be in [0, 1], got {spec.cpu_share}")
    if not cluster.machines or spec.cpu_share == 0.0:
        return []
    per_job = min(m.cpus for m in cluster.machines)
    memory = min(spec.memory_gb, min(m.memory_gb for m in cluster.machines))
    total = sum(m.cpus for m in cluster.machines)
    count = min(len(cluster.machines), math.floor(spec.cpu_share * total / per_job + 1e-9))
    out = []
    request = TaskRequest(1, per_job, memory, {})
    for i in range(count):
        duration = spec.duration_s + float(rng.uniform(-spec.jitter_s, spec.jitter_s))
        job = Job(
            name=f"warmup{i:04d}",
            image=WARMUP_IMAGE,
            tasks=request,
            submit_s=0.0,
            importance=1.0,
            slo_s=None,
        )
        out.append(Submission(job, max(duration, 1.0), warmup=True))
    return out
