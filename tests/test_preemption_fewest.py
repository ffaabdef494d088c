"""Preemption takes no more than it needs (issue 21, reproduction 6), around a starving head's reservation.

alice borrows 2 of the cluster's 5 GPUs, carol holds one, and bob claims 1 within his quota. A starving
head (dave's, older than bob's claim) holds a reservation. The reservation is not a use of anything (the
GPU it names is held by a running job already): counted as held, it made bob's shortfall look like 2 and
cost alice two jobs. And once the victim has stopped, bob's claim goes first — before the older jobs of
the round's first pass (alice's preempted job, re-queued with its W), which used to take the freed GPU
back at once.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from disagg.model import Allocation, Job, TaskRequest
from disagg.model.tenancy import Holder, Tenancy
from disagg.model.tenants import parse_tenants
from disagg.placement.backfill import place_round
from disagg.placement.fairness import FairPolicy
from disagg.placement.registry import POLICIES, get_policy
from tests.builders import make_cluster

TENANTS = parse_tenants([
    {"name": "alice", "cohort": "lab", "quota": {"gpu": 2}, "borrow": {"gpu": 3}},
    {"name": "bob", "cohort": "lab", "quota": {"gpu": 3}, "borrow": {"gpu": 2}},
    {"name": "carol", "quota": {"gpu": 1}},
])


def _gpu_job(name: str, tenant: str, submit_s: float, wait_rounds: int = 0) -> Job:
    return Job(name, "rodinia/nw", TaskRequest(1, 1.0, 1.0, {"gpu": 1}), submit_s, tenant=tenant,
               wait_rounds=wait_rounds)


def _running(jobs: dict[str, tuple[str, int]]) -> tuple[tuple[Allocation, ...], dict[str, Holder]]:
    """job → (tenant, gpu index on m0): one allocation and holder each (started in name order)."""
    allocations = tuple(Allocation(j, "m0", 1.0, 1.0, (f"m0/gpu{g}",)) for j, (_, g) in jobs.items())
    holders = {j: Holder(t, True, float(i)) for i, (j, (t, _)) in enumerate(jobs.items())}
    return allocations, holders


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_claim_preempts_one_job_for_one_gpu_beside_a_starving_heads_reservation(policy: str) -> None:
    allocations, holders = _running({"a1": ("alice", 0), "a2": ("alice", 1), "a3": ("alice", 2),
                                     "a4": ("alice", 3), "c1": ("carol", 4)})
    cluster = replace(make_cluster(machines=1, gpus=5, cpus=20), allocations=allocations)
    snapshot = cluster.with_tenancy(Tenancy(TENANTS, holders))
    window = [_gpu_job("head", "dave", 0.0, wait_rounds=200), _gpu_job("b1", "bob", 50.0)]
    done = place_round(FairPolicy(get_policy(policy)), snapshot, window, [], 100.0, np.random.default_rng(0),
                       starving_after=100)
    assert done.head == "head" and done.reservation is not None, "dave's head starves and reserves"
    assert [(p.job, p.for_job) for p in done.decisions.preempted] == [("a4", "b1")], done.decisions.preempted


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_claim_whose_victim_stopped_goes_before_the_older_jobs_of_the_first_pass(policy: str) -> None:
    allocations, holders = _running({"a1": ("alice", 0), "a2": ("alice", 1), "a3": ("alice", 2),
                                     "c1": ("carol", 4)})  # a4 was preempted for b1 and has stopped: gpu3 free
    cluster = replace(make_cluster(machines=1, gpus=5, cpus=20), allocations=allocations)
    snapshot = cluster.with_tenancy(Tenancy(TENANTS, holders, claims=frozenset({"b1"})))
    # a4, re-queued with its W, is older than the starving head; bob's claim is younger than both
    window = [_gpu_job("a4", "alice", 0.0, wait_rounds=300), _gpu_job("head", "dave", 10.0, wait_rounds=200),
              _gpu_job("b1", "bob", 50.0, wait_rounds=5)]
    done = place_round(FairPolicy(get_policy(policy)), snapshot, window, [], 100.0, np.random.default_rng(0),
                       starving_after=100)
    assert [p.job for p in done.decisions.placed] == ["b1"], done.decisions
    assert done.decisions.preempted == (), "nothing more is taken from alice"


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_claim_preempts_the_fewest_jobs_that_free_what_it_needs(policy: str) -> None:
    """bob claims 2 GPUs. alice's two newest jobs hold one GPU each (the cheapest: least progress lost),
    an older one holds two: the cheapest cover takes the two small ones, the fewest is the big one."""
    cluster = make_cluster(machines=1, gpus=6, cpus=20)
    allocations = (Allocation("c1", "m0", 1.0, 1.0, ("m0/gpu0",)), Allocation("c2", "m0", 1.0, 1.0, ("m0/gpu1",)),
                   Allocation("big", "m0", 1.0, 1.0, ("m0/gpu2", "m0/gpu3")),
                   Allocation("s1", "m0", 1.0, 1.0, ("m0/gpu4",)), Allocation("s2", "m0", 1.0, 1.0, ("m0/gpu5",)))
    holders = {"c1": Holder("carol", True, 0.0), "c2": Holder("carol", True, 0.0), "big": Holder("alice", True, 10.0),
               "s1": Holder("alice", True, 50.0), "s2": Holder("alice", True, 60.0)}
    tenants = parse_tenants([{"name": "alice", "cohort": "lab", "quota": {"gpu": 0}, "borrow": {"gpu": 6}},
                             {"name": "bob", "cohort": "lab", "quota": {"gpu": 4}},
                             {"name": "carol", "quota": {"gpu": 2}}])
    snapshot = replace(cluster, allocations=allocations).with_tenancy(Tenancy(tenants, holders))
    claim = Job("b1", "rodinia/nw", TaskRequest(1, 1.0, 1.0, {"gpu": 2}), 90.0, tenant="bob")
    d = FairPolicy(get_policy(policy)).place(snapshot, [claim], 100.0, np.random.default_rng(0))
    assert [p.job for p in d.preempted] == ["big"], d.preempted


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_claim_preempts_beside_a_borrowers_placement_in_the_first_pass(policy: str) -> None:
    """alice's old job takes the last free GPU in the first pass of a round with a starving head (dave's,
    needing 2 GPUs); bob's younger 1-GPU claim, in the second pass, must see alice borrowing 1 and
    reclaim it. (The second pass used to see alice's new placement as nobody's: alice at her quota, no
    one to reclaim from, and bob waited with nothing preempted while the head starved.)"""
    allocations, holders = _running({"a1": ("alice", 0), "a4": ("alice", 1), "c1": ("carol", 2),
                                     "d1": ("dave", 3)})
    cluster = replace(make_cluster(machines=1, gpus=5, cpus=20), allocations=allocations)
    snapshot = cluster.with_tenancy(Tenancy(TENANTS, holders))
    head = Job("head", "rodinia/nw", TaskRequest(1, 1.0, 1.0, {"gpu": 2}), 10.0, tenant="dave", wait_rounds=200)
    window = [_gpu_job("a2", "alice", 0.0, wait_rounds=300), head, _gpu_job("b1", "bob", 50.0)]
    done = place_round(FairPolicy(get_policy(policy)), snapshot, window, [], 100.0, np.random.default_rng(0),
                       starving_after=100)
    assert [p.job for p in done.decisions.placed] == ["a2"]
    assert [(p.job, p.for_job) for p in done.decisions.preempted] == [("a4", "b1")], done.decisions.preempted
