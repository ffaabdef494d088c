"""Backfill past the window, with a reservation for the head (Slurm's backfill, without run times).

The controller hands a policy the `window` oldest queued jobs each round and, for the rest of the
queue, one representative per distinct request, so that a small job behind a wall of big ones starts
when what it asks for is idle. Backfilling must not delay the queue's head, the oldest job that waits:

    pass 1   the policy on the window, exactly as without backfill
    head     the oldest window job pass 1 left waiting
    reserve  the head's target: where the policy would put it on the idle cluster (every running job
             and this round's placements gone) — the cpus and memory of its tasks' machines, its
             devices, the bandwidth of its remote devices' paths
    pass 2   the policy on the representatives, on the snapshot with pass 1's placements and the
             reservation held as if they ran

So no backfilled job ever holds what the head's reservation names: the head starts at the latest
when the jobs holding its reservation now (running, or placed by pass 1: older than it) end.
Slurm computes that moment from time limits and lets a job backfill only if it ends before it; our
jobs have no time limits, so a backfilled job simply stays off the reserved resources.

Starving heads: a head that has waited `starving_after` rounds (W) or more gets the same reservation
against the younger jobs of the window too (pass 1 then places only the jobs up to the head, and pass
2 the rest of the window and the representatives): once W passes the bound, no job submitted after
it takes what it waits for (the liveness rule, docs/design-decisions.md).

Only a job that starves for the cluster's sake is a head: one the policy left waiting because the
cluster has no room for it now. A job held back by its own tenant's quota or limit (`Reason.QUOTA`,
`OWN_LIMITS`) is not starving — room would not help it — and never reserves anything, however long its W
(a job on hold is not in the queue at all): else it would keep from every other tenant what it could not
take itself (issue 21). Nor does a head that waits by its own choice (its placement cost more than
waiting: `BY_CHOICE`) reserve a target that is free now: it declined what the reservation would hold
(`declined`).

Pure: the policy is pure, and so is this. `rng` is the round's; the reservation draws from a child of
it so that pass 1 sees the stream it saw before backfill existed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from disagg.model import Allocation, Cluster, Job
from disagg.model.tenancy import Holder
from disagg.placement.base import Clock, Policy, no_clock
from disagg.placement.commit import RoomLedger, over_commit
from disagg.placement.decisions import Decisions, JobPlacement, Reason, Unplaced

#: The job name a reservation's allocations carry (what `FreeState` sees as running there).
RESERVED = "reserved-for-"
#: Why a job waits that room on the cluster would not cure: it is held back by its own tenant. Such a
#: job is never the head: it reserves nothing.
OWN_LIMITS = frozenset({Reason.QUOTA})
#: Why a job waits when it had a placement and the policy chose waiting (its cost): such a head does not
#: reserve a target that is free now (`declined`).
BY_CHOICE = frozenset({Reason.POSTPONED, Reason.SLO_AT_RISK})


@dataclass(frozen=True)
class Round:
    """A round with backfill: the merged decisions, the head and its reservation (if any)."""

    decisions: Decisions
    head: str | None = None
    reservation: JobPlacement | None = None
    backfill: tuple[str, ...] = field(default_factory=tuple)


def as_allocations(placed: Sequence[JobPlacement], prefix: str = "") -> tuple[Allocation, ...]:
    """Placements as running allocations (one per task, its remote devices' traffic on its uplink), so
    that a policy's snapshot holds them the way it holds a running job."""
    return tuple(
        Allocation(prefix + p.job, t.machine, t.cpus, t.memory_gb, tuple(d.id for d in t.devices),
                   sum(d.network_gbps for d in t.devices if d.remote))
        for p in placed for t in p.tasks)


def holding(snapshot: Cluster, extra: tuple[Allocation, ...]) -> Cluster:
    """The snapshot with `extra` held as if it ran."""
    return replace(snapshot, allocations=snapshot.allocations + extra) if extra else snapshot


def holding_placed(snapshot: Cluster, placed: Sequence[JobPlacement], jobs: Mapping[str, Job], now: float,
                   extra: tuple[Allocation, ...] = ()) -> Cluster:
    """The snapshot with a first pass's placements (and `extra`, a reservation) held as if they ran. With
    tenants, the placements count for their jobs' tenants (a second pass books quotas on top of them,
    else a tenant could take its quota once per pass); they are never preemption's victims (nothing of
    them runs yet)."""
    after = holding(snapshot, as_allocations(placed) + extra)
    tenancy = snapshot.tenancy
    if tenancy is None or not placed:
        return after
    holders = dict(tenancy.holders)
    for p in placed:
        holders[p.job] = Holder(jobs[p.job].tenant, False, now)
    return after.with_tenancy(replace(tenancy, holders=holders))


def reservation(policy: Policy, snapshot: Cluster, head: Job, now: float, rng: np.random.Generator,
                clock: Clock = no_clock) -> JobPlacement | None:
    """Where `policy` would put `head` on the idle cluster (nothing running, nothing else placed); None
    when it could not place it even then (it cannot fit at all: nothing to reserve)."""
    decided = policy.place(replace(snapshot, allocations=()), [head], now, rng, clock)
    return decided.placed[0] if decided.placed else None


def place_round(policy: Policy, snapshot: Cluster, window: Sequence[Job], extra: Sequence[Job], now: float,
                rng: np.random.Generator, clock: Clock = no_clock, starving_after: int | None = None) -> Round:
    """One round with backfill (module docstring). `window`: the oldest queued jobs, oldest first;
    `extra`: the representatives of the rest of the queue (placed only where the head's reservation is
    not); `starving_after`: the W from which the head's reservation holds against the window too."""
    first = policy.place(snapshot, window, now, rng, clock)
    head = starving_head(window, first.unplaced)
    jobs = {j.name: j for j in window}
    if not extra and (head is None or starving_after is None or head.wait_rounds < starving_after):
        return Round(first)
    if head is None:  # nothing in the window starves for room: nothing to reserve, the rest backfills beside it
        second = policy.place(holding_placed(snapshot, first.placed, jobs, now), extra, now, rng, clock)
        return Round(_merge(policy.name, first, second, tuple(j.name for j in extra)), None, None,
                     tuple(j.name for j in extra))
    younger: list[Job] = []
    if starving_after is not None and head.wait_rounds >= starving_after:
        # The head has starved long enough: the younger jobs of the window backfill around it too.
        at = next(i for i, j in enumerate(window) if j.name == head.name)
        # a claim whose victims have stopped (`Tenancy.claims`) goes with the first pass, which places it
        # before everyone (else an older job there takes back what was reclaimed for it)
        claims = snapshot.tenancy.claims if snapshot.tenancy is not None else frozenset()
        younger = [j for j in window[at + 1:] if j.name not in claims]
        first = policy.place(snapshot, [*window[:at + 1], *(j for j in window[at + 1:] if j.name in claims)],
                             now, rng, clock)
        if head.name not in {u.job for u in first.unplaced if u.reason not in OWN_LIMITS}:
            younger_first = policy.place(holding_placed(snapshot, first.placed, jobs, now), younger, now, rng,
                                         clock)
            return Round(_merge(policy.name, first, younger_first, ()))
    child = np.random.default_rng(rng.integers(2**63))
    target = reservation(policy, snapshot, head, now, child, clock)
    after = holding_placed(snapshot, first.placed, jobs, now)
    if target is not None and declined(first.unplaced, head.name, target, after):
        target = None
    reserved = as_allocations([target], RESERVED) if target else ()
    backfill = [*younger, *extra]
    second = policy.place(holding(after, reserved), backfill, now, rng, clock)
    return Round(_merge(policy.name, first, second, tuple(j.name for j in extra), head.name if target else None),
                 head.name, target, tuple(j.name for j in backfill))


def declined(unplaced: Sequence[Unplaced], head: str, target: JobPlacement, after: Cluster) -> bool:
    """Whether the head waits by its own choice for what its reservation would hold: the policy left it
    waiting because waiting cost less (`BY_CHOICE`) while its reservation's target is free now (`after`:
    the snapshot with the pass's placements held). Holding that against younger jobs cannot help it —
    it declined it this round — and only keeps it from everyone else."""
    reason = next((u.reason for u in unplaced if u.job == head), None)
    return reason in BY_CHOICE and over_commit(target, RoomLedger.of(after)) is None


def starving_head(window: Sequence[Job], unplaced: Sequence[Unplaced]) -> Job | None:
    """The oldest window job left waiting for the cluster's sake (not by its own tenant's limits:
    `OWN_LIMITS`), or None."""
    waiting = {u.job for u in unplaced if u.reason not in OWN_LIMITS}
    return next((j for j in window if j.name in waiting), None)


def _merge(name: str, first: Decisions, second: Decisions, extra: tuple[str, ...], head: str | None = None
           ) -> Decisions:
    """Both passes as one round's decisions; a backfill candidate left waiting says it was one."""
    behind = f" (backfill: the resources reserved for {head} were held)" if head else ""
    unplaced = tuple(Unplaced(u.job, u.reason, u.message + behind) if u.job in extra else u
                     for u in second.unplaced)
    timings = {k: first.timings.get(k, 0.0) + second.timings.get(k, 0.0) for k in first.timings.keys()
               | second.timings.keys()}
    stats = {k: first.stats.get(k, 0) + second.stats.get(k, 0) for k in first.stats.keys() | second.stats.keys()}
    stats["backfilled"] = sum(1 for p in second.placed if p.job in extra)
    seen = {p.job for p in first.preempted}
    preempted = first.preempted + tuple(p for p in second.preempted if p.job not in seen)
    return Decisions(name, first.placed + second.placed, (*first.unplaced, *unplaced), timings, stats, preempted)
