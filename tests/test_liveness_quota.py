"""Reservations only for jobs that starve for the cluster's sake (issue 21, docs/design-decisions.md).

A job held back by its own tenant's quota or limit is not starving — room on the cluster would not
help it — so it never becomes the head that `placement.backfill` reserves for, however long its W,
and it never keeps another tenant's job from what that job fits in: the round, with it, decides
every other job exactly as the round without it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from disagg.model import Cluster, Job
from disagg.model.tenancy import Holder, Tenancy
from disagg.model.tenants import parse_tenants
from disagg.placement.backfill import place_round
from disagg.placement.decisions import Reason
from disagg.placement.fairness import FairPolicy
from disagg.placement.registry import POLICIES, get_policy
from tests.strategies import clusters, queues

TENANTS = ["t0", "t1", "t2"]


@st.composite
def tenancies(draw: st.DrawFn, cluster: Cluster, cohorts: bool) -> Tenancy:
    """Three tenants with small quotas (gpu, cpus), some borrowing within a cohort when `cohorts`;
    the snapshot's running jobs spread among them."""
    entries = []
    for n in TENANTS:
        quota = {r: float(draw(st.integers(0, 4))) for r in ("gpu", "cpus") if draw(st.booleans())}
        cohort = draw(st.sampled_from([None, "c"])) if cohorts else None
        borrow = {r: float(draw(st.integers(0, 3))) for r in quota if cohort and draw(st.booleans())}
        entries.append({"name": n, "quota": quota, "borrow": borrow, "cohort": cohort})
    holders = {a.job: Holder(draw(st.sampled_from(TENANTS)), draw(st.booleans()), float(draw(st.integers(0, 50))))
               for a in cluster.allocations}
    return Tenancy(parse_tenants(entries), holders)


def _tenanted(data: st.DataObject, queue: list[Job]) -> list[Job]:
    """The queue, oldest first, each job given a tenant (or none: unlimited) and a long wait."""
    jobs = [replace(j, tenant=data.draw(st.sampled_from([*TENANTS, "other"])), wait_rounds=j.wait_rounds + 10)
            for j in queue]
    return sorted(jobs, key=lambda j: (j.submit_s, j.name))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cluster=clusters(), queue=queues(), policy=st.sampled_from(sorted(POLICIES)),
       seed=st.integers(0, 50), cohorts=st.booleans())
def test_a_job_blocked_by_its_own_quota_never_holds_a_reservation(data: st.DataObject, cluster: Cluster,
                                                                  queue: list[Job], policy: str, seed: int,
                                                                  cohorts: bool) -> None:
    snapshot = cluster.with_tenancy(data.draw(tenancies(cluster, cohorts)))
    window = _tenanted(data, queue)
    fair = FairPolicy(get_policy(policy))
    alone = fair.place(snapshot, window, 100.0, np.random.default_rng(seed))
    blocked = {u.job for u in alone.unplaced if u.reason == Reason.QUOTA}
    done = place_round(fair, snapshot, window, [], 100.0, np.random.default_rng(seed), starving_after=0)
    event("a reservation" if done.reservation else "no reservation")
    event("quota-blocked jobs" if blocked else "none blocked")
    assert done.head not in blocked, f"{done.head} waits for its own quota, yet is the head"
    assert done.reservation is None or done.reservation.job not in blocked


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cluster=clusters(), queue=queues(), policy=st.sampled_from(sorted(POLICIES)),
       seed=st.integers(0, 50))
def test_a_job_blocked_by_its_own_quota_never_blocks_another_tenants_job(data: st.DataObject, cluster: Cluster,
                                                                        queue: list[Job], policy: str,
                                                                        seed: int) -> None:
    """The round decides every job that its own quota does not block as it would if the blocked jobs had
    never been submitted: same placements, same reservation. (Tenants without a cohort: a lender's queued
    jobs, blocked or not, keep its unused quota from borrowers by design, docs/fairness.md.)"""
    snapshot = cluster.with_tenancy(data.draw(tenancies(cluster, cohorts=False)))
    window = _tenanted(data, queue)
    fair = FairPolicy(get_policy(policy))
    with_them = place_round(fair, snapshot, window, [], 100.0, np.random.default_rng(seed), starving_after=0)
    blocked = {u.job for u in with_them.decisions.unplaced if u.reason == Reason.QUOTA}
    event("quota-blocked jobs" if blocked else "none blocked")
    rest = [j for j in window if j.name not in blocked]
    without = place_round(fair, snapshot, rest, [], 100.0, np.random.default_rng(seed), starving_after=0)
    assert with_them.decisions.placed == without.decisions.placed
    assert with_them.reservation == without.reservation and with_them.head == without.head
    assert {u.job for u in with_them.decisions.unplaced} - blocked == {u.job for u in without.decisions.unplaced}


def test_a_tenant_takes_its_quota_once_in_a_round_with_a_starving_head() -> None:
    """A starving head splits the round in two passes; the second books quotas on top of the first's
    placements (it used to see none of them, and let alice take her 1-GPU quota twice)."""
    from dataclasses import replace as with_

    from disagg.model import Allocation, TaskRequest
    from tests.builders import make_cluster

    running = tuple(Allocation(f"r{m}", f"m{m}", 1.0, 1.0, (f"m{m}/gpu0",)) for m in range(2))
    cluster = with_(make_cluster(machines=2, gpus=4), allocations=running)
    tenants = parse_tenants([{"name": "alice", "quota": {"gpu": 1}}])
    tenancy = Tenancy(tenants, {a.job: Holder("carol") for a in running})
    # big needs a whole machine's 20 cpus, and each machine runs a job of carol's: it waits, and starves
    window = [Job(n, "rodinia/nw", TaskRequest(1, c, 1.0, {"gpu": g} if g else {}), float(i), tenant=t, wait_rounds=w)
              for i, (n, c, g, t, w) in enumerate([("a1", 1.0, 1, "alice", 9), ("big", 20.0, 0, "bob", 9),
                                                   ("a2", 1.0, 1, "alice", 0)])]
    for name in POLICIES:
        done = place_round(FairPolicy(get_policy(name)), cluster.with_tenancy(tenancy), window, [], 100.0,
                           np.random.default_rng(0), starving_after=5)
        assert done.head == "big", name
        assert [p.job for p in done.decisions.placed] == ["a1"], name
        why = {u.job: u for u in done.decisions.unplaced}
        assert why["a2"].reason == Reason.QUOTA, (name, why["a2"])
