"""Fairness between tenants around any policy: quotas as a hard limit, fair share, preemption.

    queue → quota walk (each job's request against its tenant's quota + borrow, in queue order)
          → fair share (a term per tenant on the unscheduled arc, for the flow policies' cost model)
          → the policy, on the jobs the walk kept
          → settle (what only a placement says: its remote devices' bandwidth, against network quotas)
          → preemption (queued jobs within their tenant's nominal quota reclaim what borrowers hold)

`FairPolicy` wraps a registered policy and is itself a policy: a snapshot without a `tenancy` goes
straight through (the plain policy, unchanged); with one, every placement it returns keeps every
tenant within quota + borrow, whatever the policy inside (a test runs all six). The sequential
baselines keep their own order among the jobs the walk kept; the flow policies also price fair
share into the unscheduled arc (`cost_models`), the baselines ignore it.

Fair share: a tenant's dominant share (DRF, over decayed usage: `usage.decay`) over its weight. Of
the tenants with queued jobs, the one furthest above gets nothing; each other gets, on each of its
jobs' unscheduled arcs, `min(1, FAIR_GAIN × (top − mine) / top)` of `FAIR_BASE + WAIT_STEP × (W spread
of the queue)`: a tenant a tenth or more below the top share outbids every job of the top tenant
however long it has waited, one at the top's share outbids none. W still grows and still orders
each tenant's own jobs. A flow round also admits its queue in that order (`fair_order`): it admits
the head that fits, so the arc's cost alone would only choose among jobs the queue order chose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

import numpy as np

from disagg.model import Cluster, Job
from disagg.model.tenancy import Tenancy
from disagg.model.tenants import Tenants
from disagg.placement.base import Clock, FairTerms, Policy, no_clock
from disagg.placement.commit import EPS
from disagg.placement.cost import WAIT_STEP
from disagg.placement.decisions import Decisions, JobPlacement, Preemption, Reason, Unplaced
from disagg.placement.preemption import FitCheck, plan_preemptions, without
from disagg.placement.queue import order_queue
from disagg.placement.quota import QueueNeeds, QuotaLedger
from disagg.placement.usage import Usage, capacity, dominant_share, held_by_job, tenant_usage

#: The fair-share term of a tenant well below the top share, beyond the queue's spread of W (utility units).
FAIR_BASE = 1.0
#: How steeply the term rises below the top share: a tenant 1/FAIR_GAIN below it gets the whole term (a
#: proportional term alone would settle with the under-served tenant short of its share).
FAIR_GAIN = 10.0


def fair_shares(tenancy: Tenancy, cap: Mapping[str, float], tenants: Sequence[str]) -> dict[str, float]:
    """Each tenant's weighted dominant share over its decayed usage."""
    spec = tenancy.tenants
    return {t: dominant_share(tenancy.history.get(t, {}), cap) / spec.get(t).weight for t in tenants}


def fair_bonus(tenancy: Tenancy, cap: Mapping[str, float], queue: Sequence[Job]) -> dict[str, float]:
    """The fair-share term of each tenant's jobs on the unscheduled arc (module docstring); tenants
    at the top share are left out (zero). Empty while fewer than two tenants have queued jobs."""
    active = sorted(set(map(attrgetter("tenant"), queue)))
    if len(active) < 2:
        return {}
    shares = fair_shares(tenancy, cap, active)
    top = max(shares.values())
    if top <= 0:
        return {}
    waits = list(map(attrgetter("wait_rounds"), queue))
    scale = FAIR_BASE + WAIT_STEP * (max(waits) - min(waits))
    return {t: scale * min(1.0, FAIR_GAIN * (top - v) / top) for t, v in shares.items() if v < top}


def fair_order(ordered: Sequence[Job], bonus: Mapping[str, float]) -> list[Job]:
    """The queue as a flow round with fair share takes it: by what waiting costs, highest first —
    each job's tenant term plus `WAIT_STEP × W` — and, among equals, in the order given (longest
    wait first). A flow round admits the head of its queue that fits in what is free, so without this
    the term on the unscheduled arc would only ever choose among jobs the queue order chose already."""
    if not bonus:
        return list(ordered)
    keys = [-(bonus.get(j.tenant, 0.0) + WAIT_STEP * j.wait_rounds) for j in ordered]
    return [ordered[i] for i in sorted(range(len(ordered)), key=keys.__getitem__)]


class FairPolicy:
    """A policy with tenants' quotas, fair share and preemption around it (module docstring)."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        #: The wrapper reads W only through the policy it wraps (and the W spread for its term).
        self.reads_wait_rounds = bool(getattr(inner, "reads_wait_rounds", True))

    def place(self, snapshot: Cluster, queue: Sequence[Job], now: float, rng: np.random.Generator,
              clock: Clock = no_clock, terms: FairTerms | None = None) -> Decisions:
        """`terms` is for a policy inside: this one ignores it and computes its own (`own_terms`) from the
        snapshot's tenancy for the policy it wraps."""
        tenancy = snapshot.tenancy
        if tenancy is None:
            return self.inner.place(snapshot, queue, now, rng, clock)
        start = clock()
        usage = tenant_usage(snapshot, tenancy.holders)
        ordered = order_queue(queue, now)
        needs = QueueNeeds.of(ordered, tenancy.tenants)
        ledger = QuotaLedger(tenancy.tenants, usage, needs.demand_of(tenancy.tenants))
        kept, refused = ledger.admit(ordered, needs)
        cap = capacity(snapshot)
        own_terms = fair_bonus(tenancy, cap, kept)
        before = clock()
        decisions = self._place_claims_first(snapshot, kept, now, rng, clock, own_terms)
        after = clock()
        jobs = {j.name: j for j in kept}
        placed, dropped = settle(tenancy.tenants, usage, decisions.placed, jobs)
        preempted: list[Preemption] = []
        claims: dict[str, str] = {}
        if _may_reclaim(tenancy, ledger):
            waiting = [jobs[u.job] for u in decisions.unplaced if u.job in jobs] + [jobs[p.job] for p in dropped]
            preempted, claims = plan_preemptions(
                snapshot, tenancy, held_by_job(snapshot, tenancy.holders), cap,
                [(jobs[p.job].tenant, p) for p in placed], order_queue(waiting, now), now,
                self._fit_check(snapshot, now))
        unplaced = _unplaced(ordered, decisions.unplaced, refused, dropped, claims)
        timings = dict(decisions.timings)
        timings["fairness_s"] = (before - start) + (clock() - after)
        timings["round_s"] = clock() - start
        stats = {**decisions.stats, "quota_refused": len(refused) + len(dropped), "preempted": len(preempted)}
        return Decisions(decisions.policy, placed, unplaced, timings, stats, tuple(preempted))

    def _place_claims_first(self, snapshot: Cluster, kept: list[Job], now: float, rng: np.random.Generator,
                            clock: Clock, terms: FairTerms) -> Decisions:
        """The policy on the kept jobs; the jobs whose victims have stopped (`Tenancy.claims`) first, on
        their own, then the others on what they leave."""
        assert snapshot.tenancy is not None
        claims = snapshot.tenancy.claims
        first = [j for j in kept if j.name in claims] if claims else []
        if not first:
            return self.inner.place(snapshot, kept, now, rng, clock, terms)
        ahead = self.inner.place(snapshot, first, now, rng, clock, terms)
        rest = [j for j in kept if j.name not in claims]
        after = without(snapshot, frozenset(), ahead.placed).with_tenancy(snapshot.tenancy)
        behind = self.inner.place(after, rest, now, rng, clock, terms)
        timings = {k: ahead.timings.get(k, 0.0) + behind.timings.get(k, 0.0)
                   for k in set(ahead.timings) | set(behind.timings)}
        return Decisions(behind.policy, ahead.placed + behind.placed, (*ahead.unplaced, *behind.unplaced), timings,
                         behind.stats)

    def _fit_check(self, snapshot: Cluster, now: float) -> FitCheck:
        """The fit check preemption asks: the round's own policy, alone with the claimant, on the
        snapshot less the victims plus what is promised (no tenancy: a plain round; its own rng, so
        the round's stream is the same with or without preemption)."""
        plain = snapshot.with_tenancy(None)

        def fits(gone: frozenset[str], extra: Sequence[JobPlacement], job: Job) -> JobPlacement | None:
            trial = without(plain, gone, extra)
            found = self.inner.place(trial, [job], now, np.random.default_rng(0))
            return found.placed[0] if found.placed else None

        return fits


def settle(tenants: Tenants, usage: Mapping[str, Usage], placed: Sequence[JobPlacement],
           jobs: Mapping[str, Job]) -> tuple[tuple[JobPlacement, ...], list[JobPlacement]]:
    """Check what only a placement says — the bandwidth of its remote devices — against network
    quotas, in the policy's order; returns (kept, dropped). Everything else a placement holds was
    booked against the quotas, from its request, before the policy ran."""
    networked = {n for n, t in tenants.by_name.items() if "network_gbps" in t.quota}
    if not networked:
        return tuple(placed), []
    ledger = QuotaLedger(tenants, usage)
    kept: list[JobPlacement] = []
    dropped: list[JobPlacement] = []
    for p in placed:
        job = jobs[p.job]
        if job.tenant in networked:
            need = {"network_gbps": sum(g.network_gbps for t in p.tasks for g in t.devices if g.remote)}
            if ledger.problem(job.tenant, need, job.preemptible) is not None:
                dropped.append(p)
                continue
            ledger.take(job.tenant, need)
        kept.append(p)
    return tuple(kept), dropped


def _unplaced(ordered: Sequence[Job], inner: Sequence[Unplaced], refused: Mapping[str, str],
              dropped: Sequence[JobPlacement], claims: Mapping[str, str]) -> tuple[Unplaced, ...]:
    """Every job left waiting, in queue order, with why: the quota's words, a reclaim's, or the policy's."""
    if not refused and not dropped and not claims:
        return tuple(inner)
    why: dict[str, Unplaced] = {u.job: u for u in inner}
    for name, message in refused.items():
        why[name] = Unplaced(name, Reason.QUOTA, message)
    for p in dropped:
        why[p.job] = Unplaced(p.job, Reason.QUOTA, "its remote devices' bandwidth would take its tenant above its "
                                                   "network quota; waits")
    for name, message in claims.items():
        why[name] = Unplaced(name, Reason.RECLAIMING, message)
    return tuple(why[j.name] for j in ordered if j.name in why)


def _may_reclaim(tenancy: Tenancy, ledger: QuotaLedger) -> bool:
    """Whether preemption planning can find anything: some job is in its grace period, or some tenant
    of a cohort may hold more than its nominal quota this round (the ledger: what it held, and the
    requests of its jobs the walk kept). Else there is no borrower to reclaim from."""
    if any(h.preempted_for is not None for h in tenancy.holders.values()):
        return True
    return any(t.cohort is not None and any(ledger.used[n][r] > q + EPS for r, q in t.quota.items())
               for n, t in ledger.limited.items())


def with_fairness(policy: Policy) -> FairPolicy:
    """`policy` with quotas, fair share and preemption around it (a no-op for rounds without tenants)."""
    return policy if isinstance(policy, FairPolicy) else FairPolicy(policy)


__all__ = ["FAIR_BASE", "FairPolicy", "fair_bonus", "fair_order", "fair_shares", "settle", "with_fairness"]
