"""Fairness between tenants in the placement core (issue 15): usage, the quota ledger, fair share and
preemption, and the properties every policy keeps inside `FairPolicy`:

- no tenant ever holds more than quota + borrow of a resource its quota names (a round never takes
  a tenant above its limit, nor adds to what it holds above it);
- nothing within a tenant's nominal quota is ever preempted, and only a tenant within its nominal
  quota reclaims, from borrowers of its own cohort, never a job that is not preemptible.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from disagg.model import Allocation, Cluster, Job, TaskRequest
from disagg.model.tenancy import Holder, Tenancy
from disagg.model.tenants import parse_tenants
from disagg.placement.decisions import Decisions, Reason
from disagg.placement.fairness import FairPolicy, fair_bonus, fair_order, settle
from disagg.placement.quota import QuotaLedger
from disagg.placement.registry import POLICIES, get_policy
from disagg.placement.usage import add, by_tenant, capacity, decay, held_by_job, placement_usage, request_usage
from tests.builders import make_cluster, make_job
from tests.invariants import check_decisions
from tests.strategies import clusters, queues

SERVER_CENTRIC = {"firmament", "greedy"}
LAB = [{"name": "alice", "weight": 1, "cohort": "lab", "quota": {"gpu": 4}, "borrow": {"gpu": 4}},
       {"name": "bob", "weight": 1, "cohort": "lab", "quota": {"gpu": 4}, "borrow": {"gpu": 4}}]


def _alice_holds_everything() -> tuple[Cluster, dict[str, Holder]]:
    """Two machines of 4 GPUs; alice runs a 1-GPU job on each GPU (job a<i> started at 10·i s)."""
    cluster = make_cluster(machines=2, gpus=4)
    allocations, holders = [], {}
    for i in range(8):
        m = f"m{i // 4}"
        allocations.append(Allocation(f"a{i}", m, 1.0, 1.0, (f"{m}/gpu{i % 4}",)))
        holders[f"a{i}"] = Holder("alice", True, 10.0 * i)
    return replace(cluster, allocations=tuple(allocations)), holders


def _one_gpu(name: str, tenant: str, submit_s: float = 0.0, preemptible: bool = True) -> Job:
    return Job(name, "rodinia/nw", TaskRequest(1, 1.0, 1.0, {"gpu": 1}), submit_s, tenant=tenant,
               preemptible=preemptible)


# -- usage and the ledger ---------------------------------------------------------------------------


def test_a_remote_device_counts_as_its_kind_and_its_bandwidth_as_network() -> None:
    cluster = make_cluster(machines=1, gpus=0, pools=1, pool_gpus=2)
    cluster = replace(cluster, allocations=(Allocation("j", "m0", 2.0, 4.0, ("box0/gpu0", "box0/gpu1"), 6.0),))
    held = held_by_job(cluster, {"j": Holder("alice")})
    assert held["j"] == {"cpus": 2.0, "memory_gb": 4.0, "gpu": 2.0, "network_gbps": 6.0}
    assert by_tenant(held, {"j": Holder("alice")}) == {"alice": held["j"]}
    assert held_by_job(cluster, {}) == {}, "allocations of jobs no holder names count for no one"


def test_decay_halves_after_a_half_life_and_tends_to_current_usage() -> None:
    once = decay({"a": {"gpu": 8.0}}, {}, 3600.0, 3600.0)
    assert once["a"]["gpu"] == pytest.approx(4.0)
    toward = decay({}, {"a": {"gpu": 8.0}}, 3600.0, 3600.0)
    assert toward["a"]["gpu"] == pytest.approx(4.0)
    assert decay({"a": {"gpu": 8.0}}, {"a": {"gpu": 2.0}}, 10.0, 0.0) == {"a": {"gpu": 2.0}}


def test_quota_plus_borrow_is_the_limit_and_borrowing_needs_the_cohorts_unused_quota() -> None:
    tenants = parse_tenants([*LAB, {"name": "solo", "quota": {"gpu": 2}, "borrow": {"gpu": 2}}])
    ledger = QuotaLedger(tenants, {"alice": {"gpu": 8.0}, "solo": {"gpu": 2.0}})
    why = ledger.problem("alice", {"gpu": 1.0})
    assert why is not None and why.startswith("alice holds 8 gpu (quota 4 + borrowed 4)")
    assert "waits for its own quota" in why
    assert "no cohort to borrow from" in (ledger.problem("solo", {"gpu": 1.0}) or "")
    assert ledger.problem("bob", {"gpu": 4.0}) is None, "within its nominal quota a tenant may always take"
    assert ledger.problem("nobody", {"gpu": 100.0}) is None, "a tenant the spec does not list is unlimited"
    # bob's unused quota is lent only while bob's own queued jobs do not want it
    lending = QuotaLedger(tenants, {"alice": {"gpu": 4.0}}, demand={"bob": {"gpu": 3.0}})
    assert lending.problem("alice", {"gpu": 1.0}) is None
    assert "1 left to lend" in (lending.problem("alice", {"gpu": 2.0}) or "")
    assert "not preemptible" in (lending.problem("alice", {"gpu": 1.0}, preemptible=False) or "")


def test_the_walk_keeps_what_fits_together_and_says_why_for_the_rest() -> None:
    tenants = parse_tenants(LAB)
    queue = [_one_gpu(f"a{i}", "alice", i) for i in range(10)] + [_one_gpu("c", "carol", 0.5)]
    kept, refused = QuotaLedger(tenants, {}).admit(queue)
    assert [j.name for j in kept] == [f"a{i}" for i in range(8)] + ["c"], "quota 4 + borrow 4; carol unlimited"
    assert set(refused) == {"a8", "a9"}
    assert refused["a8"].startswith("alice holds 8 gpu (quota 4 + borrowed 4)")


# -- fair share ----------------------------------------------------------------------------------


def test_the_fair_share_term_goes_to_the_tenant_below_its_weighted_share() -> None:
    cluster = make_cluster(machines=1, gpus=4)
    tenants = parse_tenants([{"name": "alice", "weight": 2}, {"name": "bob", "weight": 1}])
    queue = [_one_gpu("a", "alice"), _one_gpu("b", "bob")]
    even = Tenancy(tenants, history={"alice": {"gpu": 2.0}, "bob": {"gpu": 2.0}})
    bonus = fair_bonus(even, capacity(cluster), queue)
    assert set(bonus) == {"alice"} and bonus["alice"] > 0, "alice weighs twice as much: at equal use she is below"
    at_share = Tenancy(tenants, history={"alice": {"gpu": 2.0}, "bob": {"gpu": 1.0}})
    assert fair_bonus(at_share, capacity(cluster), queue) == {}
    assert fair_bonus(even, capacity(cluster), queue[:1]) == {}, "one tenant queued: nothing to be fair between"
    assert [j.name for j in fair_order([queue[1], queue[0]], {"alice": 1.0})] == ["a", "b"]


def test_the_terms_reach_the_wrapped_policy_as_an_argument_and_the_snapshot_stays_as_observed() -> None:
    """Issue 23: the fair-share terms no longer travel inside the snapshot. The policy inside gets the
    snapshot the shell built (the same object) and the terms beside it; they order its queue (bob's job,
    younger but below its share, is placed on the one GPU) — without them alice's older job would be."""
    seen: list[tuple[Cluster, object]] = []
    inner = get_policy("drmaestro")

    class Recording:
        name = inner.name

        def place(self, snapshot: Cluster, queue: list[Job], now: float, rng: np.random.Generator,
                  clock: object = None, terms: object = None) -> Decisions:
            seen.append((snapshot, terms))
            return inner.place(snapshot, queue, now, rng, terms=terms)  # type: ignore[arg-type]

    tenants = parse_tenants([{"name": "alice", "weight": 1}, {"name": "bob", "weight": 1}])
    tenancy = Tenancy(tenants, history={"alice": {"gpu": 4.0}, "bob": {"gpu": 0.0}})
    cluster = make_cluster(machines=1, gpus=1).with_tenancy(tenancy)
    queue = [_one_gpu("a", "alice", submit_s=0.0), _one_gpu("b", "bob", submit_s=5.0)]
    decisions = FairPolicy(Recording()).place(cluster, queue, 10.0, np.random.default_rng(0))
    [(snapshot, terms)] = seen
    assert snapshot is cluster and snapshot.tenancy is tenancy
    assert terms == fair_bonus(tenancy, capacity(cluster), queue) and set(terms) == {"bob"}  # type: ignore[arg-type]
    assert [p.job for p in decisions.placed] == ["b"]
    plain = inner.place(cluster, queue, 10.0, np.random.default_rng(0))
    assert [p.job for p in plain.placed] == ["a"], "without the terms the older job goes first"


def test_the_term_is_on_the_unscheduled_arc_and_w_still_grows() -> None:
    from disagg.placement.cost_models import get_cost_model
    from disagg.placement.flow import FlowPlacer, _RoundJobCache
    from disagg.placement.jobstate import JobTable

    cache = _RoundJobCache()
    jobs = [FlowPlacer._job_state(replace(make_job(f"j{i}", wait_rounds=w), tenant=t), i, cache)
            for i, (w, t) in enumerate(((0, "bob"), (5, "alice")))]
    costs = get_cost_model("drmaestro")
    plain_table = JobTable.of(jobs)
    rows = JobTable.indices(jobs)
    plain = costs.task_to_unscheduled(plain_table, rows, 2)
    fair = costs.task_to_unscheduled(JobTable.of(jobs, {"bob": 0.5}), rows, 2)
    assert fair[0] - plain[0] == 500_000 and fair[1] == plain[1]
    assert plain[1] > plain[0], "W still raises the arc"


# -- preemption --------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_reclaims_borrowed_gpus_from_the_latest_started(policy: str) -> None:
    cluster, holders = _alice_holds_everything()
    snapshot = cluster.with_tenancy(Tenancy(parse_tenants(LAB), holders))
    queue = [_one_gpu(f"b{i}", "bob", 100.0 + i) for i in range(2)] + [_one_gpu("a8", "alice", 1.0)]
    d = FairPolicy(get_policy(policy)).place(snapshot, queue, 200.0, np.random.default_rng(0))
    check_decisions(cluster, queue, d, server_centric=policy in SERVER_CENTRIC)
    assert [(p.job, p.for_job) for p in d.preempted] == [("a7", "b0"), ("a6", "b1")]
    why = {u.job: u for u in d.unplaced}
    assert why["b0"].reason == Reason.RECLAIMING
    assert why["b0"].message == "waiting for 1 gpu reclaimed from alice (preempting a7, grace 30 s)"
    assert why["a8"].reason == Reason.QUOTA
    # the next round, with the victims in their grace period, preempts nothing more
    graced = {**holders, "a7": Holder("alice", True, 70.0, "b0"), "a6": Holder("alice", True, 60.0, "b1")}
    again = FairPolicy(get_policy(policy)).place(cluster.with_tenancy(Tenancy(parse_tenants(LAB), graced)), queue,
                                                 205.0, np.random.default_rng(0))
    assert again.preempted == ()
    assert {u.job: u.message for u in again.unplaced}["b1"].startswith("waiting for 1 gpu reclaimed from alice")


def test_nothing_within_nominal_quota_and_nothing_not_preemptible_is_preempted() -> None:
    cluster, holders = _alice_holds_everything()
    # alice borrows 4 GPUs, but with jobs that may not be preempted
    firm = {n: replace(h, preemptible=False) for n, h in holders.items()}
    snapshot = cluster.with_tenancy(Tenancy(parse_tenants(LAB), firm))
    d = FairPolicy(get_policy("drmaestro")).place(snapshot, [_one_gpu("b0", "bob")], 0.0, np.random.default_rng(0))
    assert d.preempted == ()
    # alice within her quota (4), the other GPUs held by carol, who has no quota: nobody borrows
    shared = {n: replace(h, tenant="alice" if int(n[1:]) < 4 else "carol") for n, h in holders.items()}
    snapshot = cluster.with_tenancy(Tenancy(parse_tenants(LAB), shared))
    d = FairPolicy(get_policy("drmaestro")).place(snapshot, [_one_gpu("b0", "bob")], 0.0, np.random.default_rng(0))
    assert d.preempted == ()
    # a bob job beyond bob's nominal quota does not reclaim either
    bob_big = Job("b", "rodinia/nw", TaskRequest(1, 1.0, 1.0, {"gpu": 5}), tenant="bob")
    d = FairPolicy(get_policy("drmaestro")).place(cluster.with_tenancy(Tenancy(parse_tenants(LAB), holders)),
                                                  [bob_big], 0.0, np.random.default_rng(0))
    assert d.preempted == ()


def test_settle_drops_a_placement_above_a_network_quota() -> None:
    tenants = parse_tenants([{"name": "alice", "quota": {"network_gbps": 1.0}}])
    cluster = make_cluster(machines=1, gpus=0, pools=1, pool_gpus=2)
    job = Job("j", "rodinia/nw", TaskRequest(1, 1.0, 1.0, {"gpu": 1}), tenant="alice", network_gbps=4.0)
    d = FairPolicy(get_policy("drmaestro")).place(cluster.with_tenancy(Tenancy(tenants)), [job], 0.0,
                                                  np.random.default_rng(0))
    assert d.placed == () and d.unplaced[0].reason == Reason.QUOTA
    assert "network quota" in d.unplaced[0].message
    plain = get_policy("drmaestro").place(cluster, [job], 0.0, np.random.default_rng(0))
    kept, dropped = settle(tenants, {}, plain.placed, {"j": job})
    assert kept == () and [p.job for p in dropped] == ["j"]


def test_a_round_without_tenancy_is_the_plain_policy() -> None:
    cluster = make_cluster()
    queue = [make_job(f"j{i}", submit_s=i) for i in range(6)]
    for name in POLICIES:
        plain = get_policy(name).place(cluster, queue, 0.0, np.random.default_rng(1))
        wrapped = FairPolicy(get_policy(name)).place(cluster, queue, 0.0, np.random.default_rng(1))
        assert plain.to_json()["placed"] == wrapped.to_json()["placed"]
        assert plain.to_json()["unplaced"] == wrapped.to_json()["unplaced"]


# -- properties: every policy ---------------------------------------------------------------------------


@st.composite
def tenancies(draw: st.DrawFn, cluster: Cluster) -> Tenancy:
    """Three tenants with random quotas, borrowing and cohorts; the snapshot's jobs spread among them."""
    names = ["t0", "t1", "t2"]
    entries = []
    for n in names:
        quota = {r: float(draw(st.integers(0, 6))) for r in ("gpu", "cpus") if draw(st.booleans())}
        borrow = {r: float(draw(st.integers(0, 4))) for r in quota if draw(st.booleans())}
        entries.append({"name": n, "weight": draw(st.sampled_from([1, 2])), "quota": quota, "borrow": borrow,
                        "cohort": draw(st.sampled_from([None, "c"]))})
    holders = {a.job: Holder(draw(st.sampled_from(names)), draw(st.booleans()), float(draw(st.integers(0, 50))))
               for a in cluster.allocations}
    return Tenancy(parse_tenants(entries), holders)


def _limits_hold(snapshot: Cluster, tenancy: Tenancy, queue: list[Job], d: Decisions) -> None:
    """No limited tenant ends the round above quota + borrow where it was not above it already (and,
    without a cohort, above its quota), nor holds more there than before."""
    before = by_tenant(held_by_job(snapshot, tenancy.holders), tenancy.holders)
    jobs = {j.name: j for j in queue}
    after = {t: dict(u) for t, u in before.items()}
    for p in d.placed:
        add(after.setdefault(jobs[p.job].tenant, {}), placement_usage(p))
    for name, t in tenancy.tenants.by_name.items():
        for r, q in t.quota.items():
            cap = t.limit(r) if t.cohort is not None else q
            had, has = before.get(name, {}).get(r, 0.0), after.get(name, {}).get(r, 0.0)
            assert has <= max(cap, had) + 1e-6, f"{name} holds {has} {r}, limit {cap} (had {had})"


def _preemptions_hold(snapshot: Cluster, tenancy: Tenancy, queue: list[Job], d: Decisions) -> None:
    per_job = held_by_job(snapshot, tenancy.holders)
    used = by_tenant(per_job, tenancy.holders)
    jobs = {j.name: j for j in queue}
    for p in d.placed:
        add(used.setdefault(jobs[p.job].tenant, {}), placement_usage(p))
    gone: dict[str, dict[str, float]] = {}
    for p in d.preempted:
        add(gone.setdefault(p.tenant, {}), per_job[p.job])
    for p in d.preempted:
        h = tenancy.holders[p.job]
        victim, claimant = tenancy.tenants.get(p.tenant), tenancy.tenants.get(p.for_tenant)
        assert h.preemptible and h.preempted_for is None and p.tenant != p.for_tenant
        assert victim.cohort is not None and victim.cohort == claimant.cohort
        # the victim is held by borrowing: its tenant stays at or above nominal quota without all its victims
        assert any(per_job[p.job].get(r, 0.0) > 0 and used[p.tenant].get(r, 0.0) - gone[p.tenant].get(r, 0.0)
                   >= q - 1e-6 for r, q in victim.quota.items()), f"{p.job} was within {p.tenant}'s quota"
        need = request_usage(jobs[p.for_job])
        assert all(used.get(p.for_tenant, {}).get(r, 0.0) + need.get(r, 0.0) <= q + 1e-6
                   for r, q in claimant.quota.items()), "only a claim within nominal quota reclaims"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cluster=clusters(), queue=queues())
def test_every_policy_keeps_quota_plus_borrow_and_preempts_only_borrowed_jobs(data: st.DataObject, cluster: Cluster,
                                                                              queue: list[Job]) -> None:
    tenancy = data.draw(tenancies(cluster))
    queue = [replace(j, tenant=data.draw(st.sampled_from(["t0", "t1", "t2", "other"])),
                     preemptible=data.draw(st.booleans())) for j in queue]
    for name, d in _every_fair_policy(cluster, tenancy, queue):
        event(f"{name}: {'preempts' if d.preempted else 'no preemption'}, "
              f"{'quota refusals' if any(u.reason == Reason.QUOTA for u in d.unplaced) else 'no quota refusal'}")


def _every_fair_policy(cluster: Cluster, tenancy: Tenancy, queue: list[Job]) -> Iterator[tuple[str, Decisions]]:
    """Each policy under FairPolicy on the cluster with `tenancy`: its decisions, once they were checked to
    be sound, to keep every tenant within quota + borrow and to preempt only what the rules allow."""
    snapshot = cluster.with_tenancy(tenancy)
    for name in POLICIES:
        d = FairPolicy(get_policy(name)).place(snapshot, queue, 100.0, np.random.default_rng(0))
        check_decisions(cluster, queue, d, server_centric=name in SERVER_CENTRIC)
        _limits_hold(snapshot, tenancy, queue, d)
        _preemptions_hold(snapshot, tenancy, queue, d)
        yield name, d


@st.composite
def crowded(draw: st.DrawFn) -> tuple[Cluster, Tenancy, list[Job]]:
    """A cluster whose GPUs are all held, by jobs of three tenants (two in a cohort), quotas that leave
    some of them borrowing, and a queue of their jobs: where preemption happens."""
    machines = draw(st.integers(1, 3))
    cluster = make_cluster(machines=machines, gpus=4, cpus=draw(st.sampled_from([8, 20])))
    names = ["t0", "t1", "t2"]
    allocations, holders = [], {}
    gpus = [f"m{m}/gpu{g}" for m in range(machines) for g in range(4)]
    i = 0
    while gpus:
        take = gpus[:draw(st.integers(1, 2))]
        gpus = gpus[len(take):]
        machine = take[0].split("/")[0]
        if len({g.split("/")[0] for g in take}) > 1:
            take = take[:1]
        allocations.append(Allocation(f"r{i}", machine, 1.0, 1.0, tuple(take)))
        holders[f"r{i}"] = Holder(draw(st.sampled_from(names)), draw(st.booleans()), float(draw(st.integers(0, 99))))
        i += 1
    total = 4 * machines
    entries = [{"name": n, "weight": 1, "cohort": None if n == "t2" else "c",
                "quota": {"gpu": float(draw(st.integers(0, total)))},
                "borrow": {"gpu": float(draw(st.integers(0, total)))}} for n in names]
    queue = [Job(f"q{k}", "rodinia/nw", TaskRequest(1, 1.0, 1.0, {"gpu": draw(st.integers(1, 2))}),
                 float(k), tenant=draw(st.sampled_from(names)), preemptible=draw(st.booleans()))
             for k in range(draw(st.integers(1, 6)))]
    return replace(cluster, allocations=tuple(allocations)), Tenancy(parse_tenants(entries), holders), queue


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=crowded())
def test_on_a_full_cluster_every_policy_preempts_only_borrowed_jobs_for_claims_within_quota(
        case: tuple[Cluster, Tenancy, list[Job]]) -> None:
    cluster, tenancy, queue = case
    for _, d in _every_fair_policy(cluster, tenancy, queue):
        event(f"{'preempts' if d.preempted else 'no preemption'}")


def test_bench_placement_with_tenants_reports_both_rounds() -> None:
    from disagg.bench.placement import run_placement_bench

    out = run_placement_bench(200, 4, 300, "drmaestro", 1, tenants=10)
    # (fair share orders the queue differently, so a few other jobs may lose to contention)
    assert out["tenants"] == 10 and abs(out["placed"] - out["plain_placed"]) <= 0.02 * out["plain_placed"]
    assert out["round_cpu_s"] > 0 and out["plain_round_cpu_s"] > 0 and out["with_over_without"] > 0
    assert out["quota_refused"] == 0, "the quotas leave every job the plain round places"
