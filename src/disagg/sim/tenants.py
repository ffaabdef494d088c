"""Tenants in the simulator: who holds what, decayed usage for fair share, and the per-tenant report.

`TenantLedger` is the simulator's side of `model.tenancy`: it follows every start and stop of a
job, builds each round's `Tenancy` (holders, decayed history, grace period) when a tenants spec is
given, and samples each round what Jain's index needs. Its report is the JSON's per-policy
`tenants: [...]` and `fairness: {"jain_dominant_share": x}`:

- per tenant: jobs, completed, mean and p95 wait (start − submit), GPU-seconds held, the most it
  ever held of each resource, and how many times its jobs were preempted;
- Jain's index of the tenants' weighted dominant shares (current usage / weight), over the tenants
  with queued work, averaged over the rounds in which two or more tenants had work queued (1 is
  perfectly even; 1/n is one tenant holding everything).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from disagg.model import Job
from disagg.model.states import JobState
from disagg.model.tenancy import DEFAULT_GRACE_S, DEFAULT_HALF_LIFE_S, Holder, Tenancy
from disagg.model.tenants import Tenants
from disagg.placement.usage import Usage, add, decay, dominant_share

#: Most points kept of each tenant's share series (for the plot).
MAX_SAMPLES = 4000


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: (Σx)² / (n Σx²); 1 when all are equal (or all zero)."""
    squares = sum(x * x for x in values)
    if not values or squares <= 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


@dataclass
class TenantLedger:
    """What the simulator tracks per tenant (module docstring). `spec` None: tenants are reported but
    no round has a tenancy (the plain policies)."""

    spec: Tenants | None
    cap: Usage
    half_life_s: float = DEFAULT_HALF_LIFE_S
    grace_s: float = DEFAULT_GRACE_S
    history: dict[str, Usage] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)
    max_held: dict[str, Usage] = field(default_factory=dict)
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    preempted: Counter[str] = field(default_factory=Counter)
    #: running job → (tenant, usage, start, preemptible)
    holding: dict[str, tuple[str, Usage, float, bool]] = field(default_factory=dict)
    #: victim → the job it is being preempted for (in its grace period)
    preempting: dict[str, str] = field(default_factory=dict)
    #: queued jobs whose victims have stopped (`Tenancy.claims`), until they start
    reclaimed: set[str] = field(default_factory=set)
    sample_times: list[float] = field(default_factory=list)
    #: Per sample: whether two or more tenants had work queued (the rounds Jain's index averages over).
    contended: list[bool] = field(default_factory=list)
    shares: dict[str, list[float]] = field(default_factory=dict)
    jain_samples: list[float] = field(default_factory=list)
    _last_s: float | None = None
    _gpu_since: dict[str, float] = field(default_factory=dict)

    def weight(self, tenant: str) -> float:
        return self.spec.get(tenant).weight if self.spec is not None else 1.0

    # -- starts and stops --

    def started(self, job: Job, usage: Usage, now: float) -> None:
        self.reclaimed.discard(job.name)
        tenant = job.tenant
        self._bank_gpus(tenant, now)
        self.holding[job.name] = (tenant, usage, now, job.preemptible)
        mine = add(self.usage.setdefault(tenant, {}), usage)
        top = self.max_held.setdefault(tenant, {})
        for r, v in mine.items():
            if v > top.get(r, 0.0):
                top[r] = v

    def stopped(self, name: str, now: float, preempted: bool = False) -> None:
        held = self.holding.pop(name, None)
        claimant = self.preempting.pop(name, None)
        if preempted and claimant is not None:
            self.reclaimed.add(claimant)
        if held is None:
            return
        tenant, usage, _, _ = held
        self._bank_gpus(tenant, now)
        add(self.usage.setdefault(tenant, {}), usage, -1.0)
        if preempted:
            self.preempted[tenant] += 1

    def _bank_gpus(self, tenant: str, now: float) -> None:
        since = self._gpu_since.get(tenant, now)
        gpus = self.usage.get(tenant, {}).get("gpu", 0.0)
        self.gpu_seconds[tenant] = self.gpu_seconds.get(tenant, 0.0) + gpus * (now - since)
        self._gpu_since[tenant] = now

    # -- rounds --

    def tenancy(self, now: float, queued: Iterable[str] = ()) -> Tenancy | None:
        """This round's tenancy (None without a spec); decays the history up to `now` first. `queued`:
        the names of the queued jobs (a claimant that is not queued any more claims nothing)."""
        if self.spec is None:
            return None
        dt = 0.0 if self._last_s is None else now - self._last_s
        self.history = decay(self.history, self.usage, dt, self.half_life_s)
        self._last_s = now
        holders = {name: Holder(t, pre, start, self.preempting.get(name))
                   for name, (t, _, start, pre) in self.holding.items()}
        self.reclaimed &= set(queued)
        return Tenancy(self.spec, holders, self.history, self.grace_s, claims=frozenset(self.reclaimed))

    def sample(self, now: float, queue: Iterable[Job]) -> None:
        """After a round: each tenant's weighted dominant share now, and Jain's index over the tenants
        with queued work when there are two or more."""
        queued = {j.tenant for j in queue}
        share = {t: dominant_share(self.usage.get(t, {}), self.cap) / self.weight(t)
                 for t in set(self.usage) | queued}
        if len(queued) >= 2:
            self.jain_samples.append(jain([share[t] for t in sorted(queued)]))
        if len(self.sample_times) < MAX_SAMPLES:
            n = len(self.sample_times)
            self.sample_times.append(now)
            self.contended.append(len(queued) >= 2)
            for t, v in share.items():
                self.shares.setdefault(t, [0.0] * n).append(v)
            for series in self.shares.values():
                if len(series) < n + 1:
                    series.append(0.0)

    # -- the report --

    def report(self, records: Sequence[Any], end_s: float) -> dict[str, Any]:
        """`{"tenants": [...], "fairness": {...}}` for the JSON (records: the run's `JobRecord`s)."""
        for tenant in list(self.usage):
            self._bank_gpus(tenant, end_s)
        by_tenant: dict[str, list[Any]] = {}
        for r in records:
            if not r.warmup:
                by_tenant.setdefault(r.tenant, []).append(r)
        rows = []
        for tenant in sorted(set(by_tenant) | set(self.max_held)):
            recs = by_tenant.get(tenant, [])
            waits = [r.start_s - r.submit_s for r in recs if not math.isnan(r.finish_s)]
            rows.append({
                "tenant": tenant,
                "jobs": len(recs),
                JobState.COMPLETED: sum(1 for r in recs if not math.isnan(r.finish_s)),
                "mean_wait_s": round(float(np.mean(waits)), 3) if waits else 0.0,
                "p95_wait_s": round(float(np.percentile(waits, 95)), 3) if waits else 0.0,
                "gpu_seconds": round(self.gpu_seconds.get(tenant, 0.0), 1),
                "max_held": {r: round(v, 3) for r, v in sorted(self.max_held.get(tenant, {}).items()) if v > 0},
                "preempted": self.preempted.get(tenant, 0),
            })
        index = float(np.mean(self.jain_samples)) if self.jain_samples else 1.0
        return {"tenants": rows, "fairness": {"jain_dominant_share": round(index, 4),
                                              "contended_rounds": len(self.jain_samples),
                                              "enabled": self.spec is not None}}


def held(tasks: Iterable[Any], kinds: Sequence[str]) -> Usage:
    """What a started job's tasks hold (the simulator's `_Task`s): cpus, memory, devices by kind, the
    bandwidth of its remote devices."""
    out: Usage = {"cpus": 0.0, "memory_gb": 0.0}
    for t in tasks:
        out["cpus"] += t.cpus
        out["memory_gb"] += t.memory_gb
        for g in t.grants:
            out[kinds[g.device]] = out.get(kinds[g.device], 0.0) + 1.0
            if g.remote and g.gbps > 0:
                out["network_gbps"] = out.get("network_gbps", 0.0) + g.gbps
    return out


__all__ = ["TenantLedger", "held", "jain"]
