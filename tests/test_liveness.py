"""No job waits forever (issue 14): the liveness rule of docs/design-decisions.md, for every policy.

(1) On a cluster where nothing else runs or waits, a job that fits under the policy's own rules is
placed in the first round (`tests/oracle.py` says whether it fits, independently of the policies).
(2) Over rounds with arrivals and completions, no job that fits waits more than a bound of rounds
once the cluster has drained.
(3) Backfill (`placement.backfill`) never takes what the queue's head waits for.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from disagg.model import Allocation, Cluster, Device, Job, Machine, Pool, TaskRequest, device_id
from disagg.placement.backfill import as_allocations, holding, place_round
from disagg.placement.decisions import JobPlacement
from disagg.placement.registry import POLICIES, get_policy
from disagg.profiles import RODINIA
from tests.harness import SERVER_CENTRIC
from tests.invariants import check_decisions
from tests.oracle import fits_idle
from tests.strategies import clusters, queues

APPS = ["rodinia/nw", "rodinia/hotspot", "rodinia/pathfinder", "rodinia/b+tree", "other/app"]


@st.composite
def idle_clusters(draw: st.DrawFn) -> Cluster:
    """Small clusters with nothing running: machines with and without local devices, pools, tight
    uplinks, a failed device here and there."""
    racks = draw(st.integers(1, 2))
    machines = [Machine(f"m{i}", f"r{i % racks}", draw(st.sampled_from([2, 4, 8, 20])), 32.0,
                        draw(st.sampled_from([1.0, 3.0, 5.0, 10.0, 40.0]))) for i in range(draw(st.integers(1, 5)))]
    pools = [Pool(f"p{i}", f"r{i % racks}", draw(st.sampled_from([3.0, 10.0, 40.0])))
             for i in range(draw(st.integers(0, 2)))]
    devices: list[Device] = []
    for loc in [m.name for m in machines] + [p.name for p in pools]:
        for kind, most in (("gpu", 4), ("nvme", 2)):
            model = draw(st.sampled_from(["K80", "P100"])) if kind == "gpu" else "ssd"
            for i in range(draw(st.integers(0, most))):
                devices.append(Device(device_id(loc, kind, i), kind, model, loc, i,  # type: ignore[arg-type]
                                      health=draw(st.sampled_from(["healthy"] * 7 + ["failed"]))))
    return Cluster(tuple(machines), tuple(pools), tuple(devices), draw(st.sampled_from([5.0, 10.0, 100.0])))


@st.composite
def single_jobs(draw: st.DrawFn) -> Job:
    devices = {k: v for k, v in (("gpu", draw(st.integers(0, 4))), ("nvme", draw(st.integers(0, 1)))) if v}
    models = {"gpu": draw(st.sampled_from(["K80", "P100"]))} if devices.get("gpu") and draw(st.booleans()) else {}
    return Job("j", draw(st.sampled_from(APPS)),
               TaskRequest(draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4])), 8.0, devices, models),
               submit_s=0.0, importance=draw(st.sampled_from([1.0, 5.0, 10.0])),
               slo_s=draw(st.sampled_from([None, 50.0, 100.0, 400.0])),
               network_gbps=draw(st.sampled_from([None, 0.5, 3.0, 6.0])))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=idle_clusters(), job=single_jobs())
def test_a_job_that_fits_an_idle_cluster_is_placed_in_the_first_round(cluster: Cluster, job: Job) -> None:
    for name in POLICIES:
        server_centric = name in SERVER_CENTRIC
        decisions = get_policy(name).place(cluster, [job], 0.0, np.random.default_rng(0))
        check_decisions(cluster, [job], decisions, server_centric=server_centric)
        fits = fits_idle(cluster, job, server_centric)
        assert bool(decisions.placed) == fits, (name, fits, decisions.unplaced, cluster, job)


# -- (2) bounded wait once drained ----------------------------------------------------------------------


@st.composite
def arrivals(draw: st.DrawFn) -> list[tuple[int, Job, int]]:
    """Jobs arriving over the first rounds: (round, job, how many rounds it runs once placed)."""
    out = []
    for i in range(draw(st.integers(1, 6))):
        job = draw(single_jobs())
        out.append((draw(st.integers(0, 4)), Job(f"j{i}", job.image, job.tasks, submit_s=float(i),
                                                  importance=job.importance, slo_s=job.slo_s,
                                                  network_gbps=job.network_gbps), draw(st.integers(1, 3))))
    return out


#: Rounds a job that fits may wait once the cluster has drained: W makes waiting dearer than any
#: placement within some tens of rounds (NA's SLO hold has no traffic to wait out once drained), and
#: each job ahead of it runs at most 3 rounds.
DRAINED_BOUND = 120


def run_rounds(policy: str, cluster: Cluster, jobs: list[tuple[int, Job, int]], rounds: int = 400
               ) -> tuple[dict[str, int], int]:
    """Rounds of one policy with arrivals and completions (what the simulator does, in rounds): when
    each job started, and the first round at which the cluster had drained (nothing running, no arrival
    to come)."""
    p = get_policy(policy)
    queue: dict[str, Job] = {}
    running: dict[str, tuple[int, tuple[Allocation, ...]]] = {}
    started: dict[str, int] = {}
    drained = -1
    last_arrival = max(at for at, _, _ in jobs)
    for r in range(rounds):
        for at, job, _ in jobs:
            if at == r:
                queue[job.name] = job
        running = {n: v for n, v in running.items() if v[0] > r}
        if drained < 0 and r > last_arrival and not running:
            drained = r
        if not queue and r > last_arrival:
            break
        snapshot = holding(cluster, tuple(a for _, allocs in running.values() for a in allocs))
        decisions = p.place(snapshot, list(queue.values()), float(r), np.random.default_rng(r))
        for placement in decisions.placed:
            length = next(d for _, j, d in jobs if j.name == placement.job)
            running[placement.job] = (r + length, as_allocations([placement]))
            started[placement.job] = r
            del queue[placement.job]
        queue = {n: j.waited() for n, j in queue.items()}
    return started, drained


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cluster=idle_clusters(), jobs=arrivals())
def test_once_drained_no_job_that_fits_waits_more_than_a_bound(cluster: Cluster, jobs: list[tuple[int, Job, int]]
                                                                ) -> None:
    assume(all(fits_idle(cluster, job, False) for _, job, _ in jobs))  # fifo: no head that never fits
    for name in POLICIES:
        started, drained = run_rounds(name, cluster, jobs)
        fitting = [job.name for _, job, _ in jobs if fits_idle(cluster, job, name in SERVER_CENTRIC)]
        for job in fitting:
            assert job in started, (name, job, started, drained)
            assert drained < 0 or started[job] <= drained + DRAINED_BOUND, (name, job, started, drained)


# -- (3) backfill never delays the head -----------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), queue=queues(), split=st.integers(1, 4), seed=st.integers(0, 100))
def test_backfill_never_takes_what_the_head_waits_for(cluster: Cluster, queue: list[Job], split: int,
                                                      seed: int) -> None:
    """The window's decisions are those without backfill, and the jobs backfilled beyond it fit beside
    the window's placements and the head's reservation held as if they ran: they take none of it."""
    ordered = sorted(queue, key=lambda j: (j.submit_s, j.name))
    window, extra = ordered[:split], ordered[split:]
    for name in POLICIES:
        alone = get_policy(name).place(cluster, window, 100.0, np.random.default_rng(seed))
        done = place_round(get_policy(name), cluster, window, extra, 100.0, np.random.default_rng(seed))
        d = done.decisions
        names = {j.name for j in window}
        assert [p for p in d.placed if p.job in names] == list(alone.placed), name
        assert [u for u in d.unplaced if u.job in names] == list(alone.unplaced), name
        backfilled = tuple(p for p in d.placed if p.job not in names)
        assert sorted([p.job for p in d.placed] + [u.job for u in d.unplaced]) == sorted(j.name for j in queue)
        held = as_allocations(alone.placed) + (as_allocations([done.reservation]) if done.reservation else ())
        assert_beside(cluster, held, backfilled)


def assert_beside(cluster: Cluster, held: tuple[Allocation, ...], placed: tuple[JobPlacement, ...]) -> None:
    """`placed` fits in what the cluster has beyond its running jobs and `held` (this round's window and
    the head's reservation): per machine cpus and memory, devices, and the bandwidth of every link that
    `placed` uses. (Written apart from `FreeState`: the same arithmetic as tests.invariants.)"""
    used: dict[str, float] = defaultdict(float)
    mem: dict[str, float] = defaultdict(float)
    link: dict[str, float] = defaultdict(float)
    taken: set[str] = set()
    by_id = cluster.device_by_id
    for a in cluster.allocations + held:
        used[a.machine] += a.cpus
        mem[a.machine] += a.memory_gb
        taken.update(a.devices)
        remote = [by_id[x].location for x in a.devices if by_id[x].location != a.machine]
        link[cluster.uplink(a.machine)] += a.network_gbps
        for loc in remote:
            for lk in cluster.path(a.machine, loc)[1:]:
                link[lk] += a.network_gbps / len(remote)
    machines = {m.name: m for m in cluster.machines}
    caps = cluster.link_by_id
    touched: set[str] = set()
    for p in placed:
        for t in p.tasks:
            used[t.machine] += t.cpus
            mem[t.machine] += t.memory_gb
            assert used[t.machine] <= machines[t.machine].cpus + 1e-6, f"{p.job} takes reserved cpus on {t.machine}"
            assert mem[t.machine] <= machines[t.machine].memory_gb + 1e-6, f"{p.job}: memory on {t.machine}"
            for g in t.devices:
                assert g.id not in taken, f"{p.job} takes {g.id}, held or reserved"
                taken.add(g.id)
                for lk in g.path:
                    link[lk] += g.network_gbps
                    touched.add(lk)
    for lk in touched:
        assert link[lk] <= caps[lk].gbps + 1e-6, f"link {lk}: {link[lk]} > {caps[lk].gbps}"


# -- past the bound, no younger job takes what the oldest waits for -----------------------------------


def starving_run(policy: str, starving_after: int | None, rounds: int = 40) -> int | None:
    """One 4-GPU machine where two 1-GPU jobs run; a 4-GPU job arrives at round 0, and a 1-GPU job every
    round after it, each running 2 rounds: the round the big job starts, or None."""
    from tests.builders import make_cluster, make_job

    cluster = make_cluster(machines=1, gpus=4)
    p = get_policy(policy)
    queue = [make_job("big", gpu=4, submit_s=0.0, slo_s=1000)]
    running: dict[str, tuple[int, tuple[Allocation, ...]]] = {
        f"w{i}": (i + 1, (Allocation(f"w{i}", "m0", 1.0, 1.0, (f"m0/gpu{i}",)),)) for i in range(2)}
    for r in range(rounds):
        queue.append(make_job(f"s{r}", gpu=1, cpus=1, submit_s=float(r + 1), slo_s=1000))
        running = {n: v for n, v in running.items() if v[0] > r}
        snapshot = holding(cluster, tuple(a for _, allocs in running.values() for a in allocs))
        ordered = sorted(queue, key=lambda j: (j.submit_s, j.name))
        done = place_round(p, snapshot, ordered, [], float(r), np.random.default_rng(r), starving_after=starving_after)
        for placement in done.decisions.placed:
            if placement.job == "big":
                return r
            running[placement.job] = (r + 2, as_allocations([placement]))
        placed = {x.job for x in done.decisions.placed}
        queue = [j.waited() for j in queue if j.name not in placed]
    return None


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "fifo"])
def test_a_stream_of_small_jobs_starves_a_big_one_until_its_reservation_holds(policy: str) -> None:
    assert starving_run(policy, None) is None  # the policies alone: one GPU is always busy
    started = starving_run(policy, starving_after=5)
    assert started is not None and started <= 5 + 2  # W reaches 5 at round 5; the last small job ends 2 later


def test_fifo_never_starves_its_head() -> None:
    assert starving_run("fifo", None) == 2  # as soon as the two running jobs end: nothing passes it


@pytest.mark.parametrize("policy", ["drmaestro", "drmaestro-na"])
def test_a_head_that_declines_what_is_free_reserves_none_of_it(policy: str) -> None:
    """A head left waiting because waiting cost less than its placement, with that placement free, does
    not reserve it: holding it against younger jobs cannot help a job that declined it, and keeps it
    from every other tenant for as long as its own cost says wait (`backfill.declined`). Its job needs
    both GPUs of the pool, remote, at 3.7x its local time; a younger 1-GPU job takes one of them.
    Once the GPUs are busy, the head starves for room and its reservation holds as before."""
    from dataclasses import replace

    from disagg.placement import Reason
    from disagg.profiles import Profile
    from tests.builders import make_cluster, make_job

    slow = Profile("slow-remote", 200.0, 0.9, 4.0, 0.0, 1.0, "tests: remote costs 3.7x")
    cluster = make_cluster(machines=1, gpus=0, pools=1, pool_gpus=2, taken_cpus={"m0": 4})
    head = replace(make_job("head", "tests/slow-remote", gpu=2, slo_s=200, wait_rounds=10), profile=slow)
    small = make_job("small", gpu=1, cpus=1, submit_s=1.0, slo_s=1000)
    done = place_round(get_policy(policy), cluster, [head, small], [], 10.0, np.random.default_rng(1),
                       starving_after=5)
    assert done.reservation is None
    assert [p.job for p in done.decisions.placed] == ["small"]
    assert {u.job: u.reason for u in done.decisions.unplaced} == {"head": Reason.POSTPONED}
    # the pool's GPUs busy (one held by a running job): the head now waits for room, and reserves
    busy = holding(cluster, (Allocation("run", "m0", 1.0, 1.0, ("box0/gpu0",)),))
    done = place_round(get_policy(policy), busy, [head, small], [], 10.0, np.random.default_rng(1),
                       starving_after=5)
    assert done.reservation is not None and done.reservation.job == "head"
    assert not done.decisions.placed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(image=st.sampled_from(sorted(RODINIA)),
       share=st.floats(0.0, 0.999), gpus=st.integers(1, 2))
def test_an_slo_below_the_local_time_never_postpones_a_job_whose_best_placement_is_free(image: str, share: float,
                                                                                      gpus: int) -> None:
    """Any Rodinia image, any SLO from 1 s up to just below its local time, on a busy machine (something
    runs there) with the GPUs it asks free on it: every flow policy places it in the first round. Read as
    given, the goal made Eq. 8 prefer waiting until W outgrew the miss (`cost.goal_s`)."""
    from disagg.placement import Reason
    from tests.builders import make_cluster, make_job

    slo = max(1.0, share * RODINIA[image].base_s)
    cluster = make_cluster(machines=1, gpus=2, taken_cpus={"m0": 4})
    job = make_job("tight", f"rodinia/{image}", gpu=gpus, slo_s=slo)
    for policy in ("drmaestro", "drmaestro-na", "firmament"):
        decisions = get_policy(policy).place(cluster, [job], 0.0, np.random.default_rng(0))
        waiting = {u.job: u.reason for u in decisions.unplaced}
        assert [p.job for p in decisions.placed] == ["tight"], (policy, slo, waiting)
        assert Reason.POSTPONED not in waiting.values()
