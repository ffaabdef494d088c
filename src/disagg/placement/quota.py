"""Quotas with borrowing: who may take what this round, as a ledger every policy's output goes through.

A tenant never holds more than its quota + borrow of a resource its quota names (Kueue's nominal
quota and borrowing limit; resources not named are unlimited). Up to its nominal quota a tenant may
always take (if the resources are held by borrowers, preemption reclaims them). Above it, it
borrows, and borrowing takes only what the other tenants of its cohort leave unused:

    Σ_cohort used + need ≤ Σ_cohort quota − what the others' queued work wants of their own unused quota

so a lender's unused quota is lent only while the lender does not want it itself (else a tenant
back within its quota would have to preempt again and again). A tenant without a cohort has no one
to borrow from; a job that is not preemptible may not borrow at all (it could never give back).

`QuotaLedger.problem` says why a tenant may not take something, in fairness terms; `take` books
it. `FairPolicy` walks the queue through a ledger before the policy runs (a job's request: cpus,
memory, devices by kind) and the placements through another after it (what only a placement says:
the bandwidth of its remote devices). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, methodcaller

import numpy as np
from numpy.typing import NDArray

from disagg.model import Job
from disagg.model.tenants import RESOURCES, Tenant, Tenants
from disagg.placement.commit import EPS
from disagg.placement.state import column
from disagg.placement.usage import Usage, request_usage

#: Shown for a resource in messages: device kinds as they are, the rest in their units.
_UNIT = {"cpus": "cpus", "memory_gb": "GB of memory", "network_gbps": "Gb/s of network"}


def what(resource: str, amount: float) -> str:
    """`8 gpu`, `64 cpus`, `40 Gb/s of network`."""
    return f"{amount:g} {_UNIT.get(resource, resource)}"


def holds(tenant: Tenant, resource: str, used: float) -> str:
    """`alice holds 16 gpu (quota 8 + borrowed 8)`."""
    quota = tenant.quota.get(resource, 0.0)
    borrowed = max(0.0, used - quota)
    extra = f" + borrowed {borrowed:g}" if borrowed > EPS else ""
    return f"{tenant.name} holds {what(resource, used)} (quota {quota:g}{extra})"


def beyond_limit(tenant: Tenant, job: Job) -> str | None:
    """Why `job` can never run for `tenant`, however long it waits: its whole request (a gang: every
    task together) is above what the tenant may ever hold of a resource its quota names — quota +
    borrow, or the quota alone for a tenant without a cohort (no one to lend) or a job that is not
    preemptible (it may not borrow). None when it may run some day. Network is left out: what a job
    draws depends on where its devices land. The message names the tenant, the resource, the limit
    and the ask (a 422 at submit; the reason of a queued job failed when a limit is lowered)."""
    if not tenant.quota:
        return None
    ask = request_usage(job)
    tasks = job.tasks.count
    for r, quota in tenant.quota.items():
        n = ask.get(r, 0.0)
        if r == "network_gbps" or n <= 0:
            continue
        if tenant.cohort is None:
            limit, how = quota, f"quota {quota:g}; no cohort to borrow from"
        elif not job.preemptible:
            limit, how = quota, f"quota {quota:g}; a job that is not preemptible may not borrow"
        else:
            limit, how = tenant.limit(r), f"quota {quota:g} + borrow {tenant.borrow.get(r, 0.0):g}"
        if n > limit + EPS:
            gang = f" ({tasks} tasks × {what(r, n / tasks)})" if tasks > 1 else ""
            return (f"tenant {tenant.name} may hold at most {what(r, limit)} ({how}); the job asks for "
                    f"{what(r, n)}{gang}: it could never run")
    return None


@dataclass
class _Cohort:
    """A cohort's sums over the members whose quota names each resource."""

    quota: Usage = field(default_factory=dict)
    used: Usage = field(default_factory=dict)
    #: Per member, the part of its unused nominal quota its own queued work wants.
    reserved: dict[str, Usage] = field(default_factory=dict)
    #: Bumped at every take by a member: a refusal remembered under an older one may no longer hold.
    generation: int = 0


class QuotaLedger:
    """What each limited tenant holds this round, and its cohort's sums; `problem` and `take`.

    `usage`: what tenants hold now; `demand`: what their queued jobs ask for (for the lenders'
    reservations). Tenants the spec does not list, and resources a quota does not name, are not
    tracked: they are unlimited.
    """

    def __init__(self, tenants: Tenants, usage: Mapping[str, Mapping[str, float]],
                 demand: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.tenants = tenants
        self.limited: dict[str, Tenant] = {n: t for n, t in tenants.by_name.items() if t.quota}
        self.used: dict[str, Usage] = {n: {r: usage.get(n, {}).get(r, 0.0) for r in t.quota}
                                       for n, t in self.limited.items()}
        self.cohorts: dict[str, _Cohort] = {}
        self._own_generation: dict[str, int] = {}
        demand = demand or {}
        for n, t in self.limited.items():
            if t.cohort is None:
                continue
            c = self.cohorts.setdefault(t.cohort, _Cohort())
            wants = demand.get(n, {})
            c.reserved[n] = {}
            for r, q in t.quota.items():
                c.quota[r] = c.quota.get(r, 0.0) + q
                c.used[r] = c.used.get(r, 0.0) + self.used[n][r]
                c.reserved[n][r] = min(max(0.0, q - self.used[n][r]), wants.get(r, 0.0))
        self._reserved_total = {name: _sum(c.reserved.values()) for name, c in self.cohorts.items()}

    def limits(self, tenant: str) -> Tenant | None:
        """The tenant's spec when it has a quota (None: unlimited)."""
        return self.limited.get(tenant)

    def generation(self, tenant: str) -> int:
        """Changes whenever something this tenant's answers depend on is taken."""
        t = self.limited[tenant]
        return self.cohorts[t.cohort].generation if t.cohort is not None else self._own_generation.get(tenant, 0)

    def problem(self, tenant: str, need: Mapping[str, float], preemptible: bool = True) -> str | None:
        """Why `tenant` may not take `need` now, in fairness terms; None when it may."""
        t = self.limited.get(tenant)
        if t is None:
            return None
        used = self.used[tenant]
        for r, n in need.items():
            if n <= 0 or r not in t.quota:
                continue
            after, quota = used[r] + n, t.quota[r]
            if after <= quota + EPS:
                continue
            why = self._borrow_problem(t, r, n, after, preemptible)
            if why is not None:
                return why
        return None

    def _borrow_problem(self, t: Tenant, r: str, n: float, after: float, preemptible: bool) -> str | None:
        """Why `t` may not borrow to hold `after` of `r` (None: it may)."""
        used = self.used[t.name][r]
        now = holds(t, r, used)
        if not preemptible:
            return (f"{now}; the job needs {n:g} more and is not preemptible, so it may not borrow; "
                    f"waits for its own quota")
        limit = t.limit(r)
        if after > limit + EPS:
            return (f"{now}; the job needs {n:g} more, above its limit of {limit:g} "
                    f"(quota {t.quota[r]:g} + borrow {t.borrow.get(r, 0.0):g}); waits for its own quota")
        if t.cohort is None:
            return f"{now}; the job needs {n:g} more and it has no cohort to borrow from; waits for its own quota"
        c = self.cohorts[t.cohort]
        others = self._reserved_total[t.cohort].get(r, 0.0) - c.reserved[t.name].get(r, 0.0)
        lendable = c.quota.get(r, 0.0) - others - c.used.get(r, 0.0)
        if n <= lendable + EPS:
            return None
        wanted = f" ({others:g} of the unused quota is wanted by its lenders' queued jobs)" if others > EPS else ""
        return (f"{now}; the job needs {n:g} more and cohort {t.cohort} has {max(lendable, 0.0):g} left to lend"
                f"{wanted}; waits")

    def take(self, tenant: str, need: Mapping[str, float]) -> None:
        """Book `need` for `tenant` (after `problem` said it may)."""
        t = self.limited.get(tenant)
        if t is None:
            return
        used = self.used[tenant]
        c = self.cohorts.get(t.cohort) if t.cohort is not None else None
        for r, n in need.items():
            if n <= 0 or r not in t.quota:
                continue
            used[r] += n
            if c is not None:
                c.used[r] = c.used.get(r, 0.0) + n
                mine = c.reserved[tenant]
                gone = min(mine.get(r, 0.0), n)
                if gone > 0:
                    mine[r] -= gone
                    self._reserved_total[t.cohort][r] -= gone  # type: ignore[index]
        if c is not None:
            c.generation += 1
        else:
            self._own_generation[tenant] = self._own_generation.get(tenant, 0) + 1

    def admit(self, ordered: Sequence[Job], needs: QueueNeeds | None = None) -> tuple[list[Job], dict[str, str]]:
        """Walk the queue in order: each job of a limited tenant is kept if its request fits what its
        tenant may still take (booked at once, so the jobs kept of a tenant fit together), else
        refused with why. A tenant whose queued jobs all fit in its nominal quota together keeps them
        all at once (the usual case: no walk). A job asking for what the last refused one of its
        tenant asked for, with nothing taken in its cohort since, is refused the same way without a
        look. `needs`: the queue's requests as `QueueNeeds.of(ordered, ...)` gives them."""
        if not self.limited:
            return list(ordered), {}
        needs = needs if needs is not None else QueueNeeds.of(ordered, self.tenants)
        whole = self._take_whole(needs)
        refused: dict[str, str] = {}
        keep = [needs.codes[i] < 0 or needs.names[needs.codes[i]] in whole for i in range(len(ordered))]
        seen: dict[tuple[str, tuple[float, ...], bool], tuple[int, str]] = {}
        for i in (i for i, k in enumerate(keep) if not k):
            job = ordered[i]
            row = tuple(needs.matrix[i].tolist())
            key = (job.tenant, row, job.preemptible)
            generation = self.generation(job.tenant)
            last = seen.get(key)
            if last is not None and last[0] == generation:
                refused[job.name] = last[1]
                continue
            need = dict(zip(needs.resources, row, strict=True))
            why = self.problem(job.tenant, need, job.preemptible)
            if why is None:
                self.take(job.tenant, need)
                keep[i] = True
            else:
                seen[key] = (generation, why)
                refused[job.name] = why
        return [j for j, k in zip(ordered, keep, strict=True) if k], refused

    def _take_whole(self, needs: QueueNeeds) -> set[str]:
        """Book, at once, the queued jobs of each tenant whose jobs all fit in its nominal quota
        together; returns those tenants."""
        whole = set()
        for code, name in enumerate(needs.names):
            t = self.limited[name]
            demand = needs.demand[code]
            used = self.used[name]
            if all(used[r] + demand[j] <= t.quota[r] + EPS for j, r in enumerate(needs.resources) if r in t.quota):
                self.take(name, {r: float(demand[j]) for j, r in enumerate(needs.resources)})
                whole.add(name)
        return whole


@dataclass
class QueueNeeds:
    """The requests of a queue's jobs as a matrix (one row per job, one column per resource some quota
    names, network aside), with each limited tenant's total: read once per round, as columns."""

    resources: tuple[str, ...]
    #: per job, its tenant's code in `names` (-1: a tenant without a quota)
    codes: list[int]
    names: list[str]
    matrix: NDArray[np.float64]
    demand: NDArray[np.float64]

    @classmethod
    def of(cls, ordered: Sequence[Job], tenants: Tenants) -> QueueNeeds:
        limited = {n: t for n, t in tenants.by_name.items() if t.quota}
        resources = tuple(r for r in RESOURCES if r != "network_gbps" and any(r in t.quota for t in limited.values()))
        tenant_of = list(map(attrgetter("tenant"), ordered))
        names = sorted(set(tenant_of) & set(limited))
        code = {n: i for i, n in enumerate(names)}
        codes = [code.get(t, -1) for t in tenant_of]
        tasks = list(map(attrgetter("tasks"), ordered))
        n = len(tasks)
        count = column(tasks, "count")
        columns = []
        for r in resources:
            if r in ("cpus", "memory_gb"):
                columns.append(count * column(tasks, r))
            else:
                per_task = np.fromiter(map(methodcaller("get", r, 0), map(attrgetter("devices"), tasks)),
                                       dtype=np.float64, count=n)
                columns.append(count * per_task)
        matrix = np.stack(columns, axis=1) if columns else np.zeros((n, 0))
        demand = np.zeros((len(names), len(resources)))
        at = np.array(codes, dtype=np.int64)
        mine = at >= 0
        np.add.at(demand, at[mine], matrix[mine])
        return cls(resources, codes, names, matrix, demand)

    def demand_of(self, tenants: Tenants) -> dict[str, Usage]:
        """What the queued jobs of each tenant in a cohort ask for in all (lenders' reservations)."""
        return {n: dict(zip(self.resources, self.demand[i].tolist(), strict=True))
                for i, n in enumerate(self.names) if tenants.get(n).cohort is not None}


def _sum(usages: Iterable[Mapping[str, float]]) -> Usage:
    out: Usage = {}
    for u in usages:
        for r, v in u.items():
            out[r] = out.get(r, 0.0) + v
    return out


def demand_of(queue: Sequence[Job], tenants: Tenants) -> dict[str, Usage]:
    """What the queued jobs of each tenant in a cohort ask for in all (lenders' reservations)."""
    return QueueNeeds.of(queue, tenants).demand_of(tenants)


__all__ = ["QueueNeeds", "QuotaLedger", "beyond_limit", "demand_of", "holds", "what"]
