"""Preemption: a tenant within its nominal quota takes back what borrowers of its cohort hold.

After a round, a queued job that its policy could not place is a *claimant* when its tenant has a
quota and a cohort, and the job fits in what remains of that tenant's nominal quota (counting the
tenant's placements this round and the claimants before it). For a claimant, victims are chosen
among the running jobs of the other tenants of its cohort:

- only jobs their tenant holds by borrowing: in some resource its quota names, the tenant holds
  more than its nominal quota even without this job (and the other victims of that tenant) — so
  nothing within a tenant's nominal quota is ever preempted;
- never a job that is not preemptible, nor one already being preempted;
- only jobs that hold something the claimant is short of;
- cheapest first: least progress lost (the most recently started), then the tenant most over its
  share, then by name — added until what they give back covers the claimant's shortfall and the
  claimant really fits on the cluster without them (a fit check with the round's own policy), then
  any victim the cover does not need is left out again;
- the fewest: when that leaves more than one victim, smaller sets of candidates are tried, one victim,
  then two, … (cheapest first among sets of a size; bounded by `MAX_VICTIM_SETS` and the fit checks),
  and the first that covers the shortfall and lets the claimant fit is taken instead;
- a starving head's reservation (`backfill`) is not counted as held: it names what is free or held by
  a running job already, and counting it again made a claim look short of more than it is.

A claimant for whom victims are already in their grace period waits for them ("waiting for 2 gpu
reclaimed from alice (preempting j-…, grace 30 s)") and none are added. A claimant that would not
fit even with every candidate gone preempts nothing. Bounded work per round: at most
`MAX_CLAIMANTS` claimants and `MAX_FIT_CHECKS` fit checks. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from disagg.model import Allocation, Cluster, Job
from disagg.model.tenancy import Tenancy
from disagg.model.tenants import Tenant
from disagg.placement.backfill import RESERVED
from disagg.placement.commit import EPS
from disagg.placement.decisions import JobPlacement, Preemption
from disagg.placement.quota import what
from disagg.placement.usage import Usage, add, by_tenant, dominant_share, placement_usage, request_usage

#: At most this many claimants get victims chosen per round (the rest wait for the next round).
MAX_CLAIMANTS = 8
#: At most this many fit checks per round (each is a one-job round of the policy).
MAX_FIT_CHECKS = 8
#: At most this many sets of victims are looked at per claim in the search for fewer victims (`_fewest`).
MAX_VICTIM_SETS = 512
#: The resources a shortfall is looked for in (network is the fit check's to find).
_SHORT_OF = ("cpus", "memory_gb", "gpu", "nvme", "fpga", "memory")

#: Does `job` fit on the snapshot less the allocations of `gone`, plus `extra` placements? Its placement, or None.
FitCheck = Callable[[frozenset[str], Sequence[JobPlacement], Job], JobPlacement | None]


def as_allocations(p: JobPlacement) -> list[Allocation]:
    """A placement as the allocations it would be once running (one per task)."""
    return [Allocation(p.job, t.machine, t.cpus, t.memory_gb, tuple(g.id for g in t.devices),
                       sum(g.network_gbps for g in t.devices if g.remote)) for t in p.tasks]


def without(snapshot: Cluster, gone: frozenset[str], extra: Sequence[JobPlacement]) -> Cluster:
    """The snapshot as it would be once the jobs `gone` have stopped and `extra` have started."""
    kept = [a for a in snapshot.allocations if a.job not in gone]
    for p in extra:
        kept += as_allocations(p)
    return Cluster(snapshot.machines, snapshot.pools, snapshot.devices, snapshot.rack_uplink_gbps, tuple(kept),
                   down_links=snapshot.down_links)


@dataclass
class _Claims:
    """What preemption planning tracks through one round."""

    snapshot: Cluster
    tenancy: Tenancy
    per_job: Mapping[str, Usage]
    cap: Usage
    now: float
    used: dict[str, Usage]
    free: Usage
    #: Victims chosen this round and those already in their grace period (no candidates any more).
    gone: set[str] = field(default_factory=set)
    #: Victims chosen this round: fit checks see them gone (those in their grace period are promised
    #: to their own claimants, whose placements the round does not know).
    chosen: set[str] = field(default_factory=set)
    #: Placements the claimants will take (their fit checks' answers).
    promised: list[JobPlacement] = field(default_factory=list)
    fit_checks: int = 0

    def tenant(self, name: str) -> Tenant:
        return self.tenancy.tenants.get(name)


def plan_preemptions(snapshot: Cluster, tenancy: Tenancy, per_job: Mapping[str, Usage], cap: Usage,
                     placed: Sequence[tuple[str, JobPlacement]], waiting: Sequence[Job], now: float,
                     fits: FitCheck) -> tuple[list[Preemption], dict[str, str]]:
    """The preemptions of a round and, per claimant, why it waits (module docstring).

    `placed`: this round's placements with their jobs' tenants; `waiting`: the jobs left waiting
    that the quota walk did not refuse, in queue order."""
    holders = tenancy.holders
    used = by_tenant(per_job, holders)
    for tenant, p in placed:
        add(used.setdefault(tenant, {}), placement_usage(p))
    claims = _Claims(snapshot, tenancy, per_job, cap, now, used, _free(snapshot, cap, [p for _, p in placed]))
    in_grace: dict[str, list[str]] = {}
    for name, h in holders.items():
        if h.preempted_for is not None and name in per_job:
            # leaving: what it holds is no longer its tenant's, and is coming free for its claimant
            in_grace.setdefault(h.preempted_for, []).append(name)
            claims.gone.add(name)
            add(claims.used.setdefault(h.tenant, {}), per_job[name], -1.0)
            add(claims.free, {r: v for r, v in per_job[name].items() if r in claims.free})
    for job in waiting:
        if job.name in in_grace:  # what its victims give back is promised to it
            add(claims.free, {r: v for r, v in request_usage(job).items() if r in claims.free}, -1.0)
    out: list[Preemption] = []
    messages: dict[str, str] = {}
    claimants = 0
    for job in waiting:
        t = tenancy.tenants.by_name.get(job.tenant)
        if t is None or not t.quota or t.cohort is None:
            continue
        need = request_usage(job)
        mine = claims.used.setdefault(t.name, {})
        if any(mine.get(r, 0.0) + need.get(r, 0.0) > q + EPS for r, q in t.quota.items()):
            continue  # beyond its nominal quota: it borrows, it does not reclaim
        if job.name in in_grace:
            add(mine, need)
            messages[job.name] = _waiting(claims, job.name, in_grace[job.name])
            continue
        if claimants >= MAX_CLAIMANTS or claims.fit_checks >= MAX_FIT_CHECKS:
            break
        claimants += 1
        claim = _victims(claims, job, t, need, fits)
        if claim is not None:
            victims, awaited = claim
            add(mine, need)
            out += victims
            messages[job.name] = _waiting(claims, job.name, awaited)
    return out, messages


def _free(snapshot: Cluster, cap: Usage, placed: Sequence[JobPlacement]) -> Usage:
    """What the cluster has free of each resource once this round's placements start. A starving head's
    reservation (`backfill.RESERVED`) is not a use of anything — what it names is free or held by a
    running job already — so it is not counted: counted, it doubled what it overlaps and made a claim
    look short of more than it is, and preempt more than it needs (issue 21)."""
    held: Usage = {"cpus": 0.0, "memory_gb": 0.0}
    kind_of: dict[str, str] | None = None
    for a in snapshot.allocations:
        if a.job.startswith(RESERVED):
            continue
        held["cpus"] += a.cpus
        held["memory_gb"] += a.memory_gb
        if a.devices:
            kind_of = kind_of if kind_of is not None else {d.id: d.kind for d in snapshot.devices}
            for d in a.devices:
                if d in kind_of:
                    held[kind_of[d]] = held.get(kind_of[d], 0.0) + 1.0
    for p in placed:
        add(held, placement_usage(p))
    return {r: cap.get(r, 0.0) - held.get(r, 0.0) for r in _SHORT_OF}


def _victims(claims: _Claims, job: Job, t: Tenant, need: Usage,
             fits: FitCheck) -> tuple[list[Preemption], list[str]] | None:
    """The cheapest set of borrowed jobs whose stopping lets `job` fit, and every preempted job it waits
    for (those, or victims chosen before whose resources are enough for it too); None: no claim."""
    short = {r for r in _SHORT_OF if need.get(r, 0.0) > claims.free.get(r, 0.0) + EPS}
    if not short:
        # The cluster has enough in all: where it sits may still not do (a gang, a server-centric policy).
        placement = _check(claims, job, fits)
        if placement is not None:
            # It fits once the jobs already being preempted stop: it waits for them (none: it waits for
            # another reason, postponed or contention, and claims nothing). Either way it is promised.
            awaited = _awaited(claims, placement)
            _promise(claims, placement)
            return ([], awaited) if awaited else None
        short = {r for r in _SHORT_OF if need.get(r, 0.0) > 0}
    candidates = _candidates(claims, t, short)
    for order in _orders(claims, candidates):
        found = _cover(claims, job, need, short, order, fits)
        if found is not None:
            chosen, placement = _trim(claims, job, need, short, *found, fits) or found
            if len(chosen) > 1:
                chosen, placement = _fewest(claims, job, need, short, candidates, len(chosen) - 1, fits) or (
                    chosen, placement)
            return _commit(claims, job, chosen, placement), chosen
        if claims.fit_checks >= MAX_FIT_CHECKS:
            break
    return None


def _cover(claims: _Claims, job: Job, need: Usage, short: set[str], order: list[str],
           fits: FitCheck) -> tuple[list[str], JobPlacement] | None:
    """Victims taken along `order` until what they give back covers the shortfall and the claimant
    fits (a fit check each time the cover holds): the victims and the claimant's placement, or None."""
    chosen: list[str] = []
    back: Usage = {}
    taken: dict[str, Usage] = {}
    for victim in order:
        u = claims.tenancy.holders[victim].tenant
        held = claims.per_job[victim]
        if not _borrowed(claims, claims.tenant(u), held, taken.get(u, {})):
            continue
        chosen.append(victim)
        add(back, held)
        add(taken.setdefault(u, {}), held)
        if all(need.get(r, 0.0) <= claims.free.get(r, 0.0) + back.get(r, 0.0) + EPS for r in short):
            placement = _check(claims, job, fits, frozenset(chosen))
            if placement is not None:
                return chosen, placement
            if claims.fit_checks >= MAX_FIT_CHECKS:
                return None
    return None


def _fewest(claims: _Claims, job: Job, need: Usage, short: set[str], candidates: list[str], most: int,
            fits: FitCheck) -> tuple[list[str], JobPlacement] | None:
    """The fewest victims (at most `most`) whose stopping lets `job` fit, cheapest first among sets of
    one size: sets of 1, 2, … candidates that cover the shortfall and are all held by borrowing, each
    fit-checked, while `MAX_VICTIM_SETS` sets and the round's fit checks last. None: no smaller set
    found (the greedy cover, trimmed, stands)."""
    looked = 0
    for k in range(1, most + 1):
        for victims in combinations(candidates, k):
            looked += 1
            if looked > MAX_VICTIM_SETS or claims.fit_checks >= MAX_FIT_CHECKS:
                return None
            back: Usage = {}
            taken: dict[str, Usage] = {}
            for victim in victims:
                u = claims.tenancy.holders[victim].tenant
                if not _borrowed(claims, claims.tenant(u), claims.per_job[victim], taken.get(u, {})):
                    break
                add(back, claims.per_job[victim])
                add(taken.setdefault(u, {}), claims.per_job[victim])
            else:
                if all(need.get(r, 0.0) <= claims.free.get(r, 0.0) + back.get(r, 0.0) + EPS for r in short):
                    placement = _check(claims, job, fits, frozenset(victims))
                    if placement is not None:
                        return list(victims), placement
    return None


def _orders(claims: _Claims, candidates: list[str]) -> list[list[str]]:
    """The candidates cheapest first, then, for a claimant whose tasks need their resources together
    (a server-centric policy, a gang on one machine), the same with each machine's first."""
    machine: dict[str, str] = {}
    for a in claims.snapshot.allocations:
        machine.setdefault(a.job, a.machine)
    places = list(dict.fromkeys(machine[j] for j in candidates if j in machine))
    orders = [candidates]
    if len(places) > 1:
        for place in places:  # (sorted is stable: within each part, cheapest first still)
            orders.append([j for j in candidates if machine.get(j) == place] +
                          [j for j in candidates if machine.get(j) != place])
    return orders


def _candidates(claims: _Claims, t: Tenant, short: set[str]) -> list[str]:
    """Running jobs of the other tenants of `t`'s cohort that hold something `t` is short of and may
    be preempted, cheapest first: least progress lost, then the tenant most over its share."""
    holders, tenants = claims.tenancy.holders, claims.tenancy.tenants
    over = {name: dominant_share(u, claims.cap) / tenants.get(name).weight for name, u in claims.used.items()}
    out = []
    for job, h in holders.items():
        if h.tenant == t.name or not h.preemptible or job in claims.gone or job not in claims.per_job:
            continue
        other = tenants.by_name.get(h.tenant)
        if other is None or other.cohort != t.cohort or not other.quota:
            continue
        if any(claims.per_job[job].get(r, 0.0) > 0 for r in short):
            out.append(job)
    out.sort(key=lambda j: (claims.now - holders[j].start_s, -over.get(holders[j].tenant, 0.0), j))
    return out


def _borrowed(claims: _Claims, u: Tenant, held: Usage, taken: Usage) -> bool:
    """Whether `u` holds this job by borrowing: in some resource its quota names and the job holds,
    `u` stays at or above its nominal quota without it (and without its other victims)."""
    used = claims.used.get(u.name, {})
    return any(held.get(r, 0.0) > 0 and used.get(r, 0.0) - taken.get(r, 0.0) - held[r] >= q - EPS
               for r, q in u.quota.items())


def _check(claims: _Claims, job: Job, fits: FitCheck, gone: frozenset[str] = frozenset()) -> JobPlacement | None:
    claims.fit_checks += 1
    return fits(frozenset(claims.chosen) | gone, claims.promised, job)


def _trim(claims: _Claims, job: Job, need: Usage, short: set[str], chosen: list[str], _placement: JobPlacement,
          fits: FitCheck) -> tuple[list[str], JobPlacement] | None:
    """Leave out, costliest first, each victim the claimant fits without (the cover in all, then a fit
    check, while the round's checks last): the victims kept and the claimant's placement then; None
    when none can go."""
    keep = list(chosen)
    back = {r: sum(claims.per_job[v].get(r, 0.0) for v in keep) for r in short}
    found: JobPlacement | None = None
    for victim in reversed(chosen):
        held = claims.per_job[victim]
        if claims.fit_checks >= MAX_FIT_CHECKS or len(keep) == 1:
            break
        if not all(need.get(r, 0.0) <= claims.free.get(r, 0.0) + back[r] - held.get(r, 0.0) + EPS for r in short):
            continue
        rest = [v for v in keep if v != victim]
        placement = _check(claims, job, fits, frozenset(rest))
        if placement is not None:
            keep, found = rest, placement
            for r in short:
                back[r] -= held.get(r, 0.0)
    return None if found is None else (keep, found)


def _commit(claims: _Claims, job: Job, chosen: list[str], placement: JobPlacement) -> list[Preemption]:
    out = []
    for victim in chosen:
        h = claims.tenancy.holders[victim]
        held = claims.per_job[victim]
        add(claims.free, {r: v for r, v in held.items() if r in claims.free})
        add(claims.used.setdefault(h.tenant, {}), held, -1.0)
        claims.gone.add(victim)
        claims.chosen.add(victim)
        out.append(Preemption(victim, h.tenant, job.name, job.tenant, dict(held)))
    _promise(claims, placement)
    return out


def _promise(claims: _Claims, placement: JobPlacement) -> None:
    """A claimant's placement: what later claimants of the round must leave it."""
    add(claims.free, {r: v for r, v in placement_usage(placement).items() if r in claims.free}, -1.0)
    claims.promised.append(placement)


def _awaited(claims: _Claims, placement: JobPlacement) -> list[str]:
    """The jobs preempted this round whose devices (or, without devices, whose machines) `placement` uses."""
    devices = {g.id for t in placement.tasks for g in t.devices}
    machines = {t.machine for t in placement.tasks}
    out = []
    for a in claims.snapshot.allocations:
        if a.job not in claims.chosen or a.job in out:
            continue
        if devices & set(a.devices) or (not devices and a.machine in machines):
            out.append(a.job)
    return out


def _waiting(claims: _Claims, claimant: str, victims: list[str]) -> str:
    """`waiting for 2 gpu reclaimed from alice (preempting j-…, grace 30 s)`."""
    back: Usage = {}
    owners: list[str] = []
    for v in victims:
        add(back, claims.per_job.get(v, {}))
        owner = claims.tenancy.holders[v].tenant if v in claims.tenancy.holders else "?"
        if owner not in owners:
            owners.append(owner)
    kinds = [r for r in ("gpu", "nvme", "fpga", "memory") if back.get(r, 0.0) > 0] or ["cpus"]
    shown = ", ".join(what(r, back.get(r, 0.0)) for r in kinds)
    names = ", ".join(victims[:3]) + (f" and {len(victims) - 3} more" if len(victims) > 3 else "")
    return (f"waiting for {shown} reclaimed from {', '.join(owners)} (preempting {names}, "
            f"grace {claims.tenancy.grace_s:g} s)")


__all__ = ["MAX_CLAIMANTS", "MAX_FIT_CHECKS", "FitCheck", "as_allocations", "plan_preemptions", "without"]
