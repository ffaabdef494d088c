"""The simulation loop with the real policies: same decisions as `disagg place`, no over-commit, the
execution model applied, wait counters, determinism, failures."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sim_helpers import Round, recording, small_scenario
from typer.testing import CliRunner

from disagg.cli import app
from disagg.model import Allocation, Cluster, Job, TaskRequest, parse_cluster
from disagg.model.states import DEVICE_FAILED
from disagg.placement import Decisions, DeviceGrant, JobPlacement, TaskPlacement
from disagg.placement.base import Clock, FairTerms, WaitingQueue, no_clock
from disagg.placement.commit import EPS, over_commit
from disagg.placement.decisions import LaterReasons, LaterStats
from disagg.placement.registry import POLICIES, get_policy
from disagg.profiles import lookup
from disagg.sim.engine import FailureModel, SimConfig, SimResult, Simulation, _as_reserved, simulate, waited
from disagg.sim.execution import collocation_factor
from disagg.sim.metrics import summarize
from disagg.sim.scenarios import get_scenario
from disagg.sim.workload import Submission

WALL_KEYS = {"wall_s", "sched_latency_p50_s", "sched_latency_p99_s", "sim_s_per_wall_s", "rounds_per_wall_s"}


def cluster_spec(snapshot: Cluster) -> dict[str, Any]:
    """A snapshot written back as a cluster spec (what a user would give `disagg place`)."""
    machines: list[dict[str, Any]] = []
    for m in snapshot.machines:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for d in snapshot.devices:
            if d.location != m.name:
                continue
            if groups[d.kind] and groups[d.kind][-1]["model"] == d.model:
                groups[d.kind][-1]["count"] += 1
            else:
                groups[d.kind].append({"count": 1, "model": d.model})
        machines.append({"name": m.name, "rack": m.rack, "cpus": m.cpus, "memory_gb": m.memory_gb,
                         "uplink_gbps": m.uplink_gbps, "devices": dict(groups)})
    return {
        "machines": machines,
        "network": {"rack_uplink_gbps": snapshot.rack_uplink_gbps},
        "allocations": [{"job": a.job, "machine": a.machine, "cpus": a.cpus, "memory_gb": a.memory_gb,
                         "devices": list(a.devices), "network_gbps": a.network_gbps}
                        for a in snapshot.allocations],
        "failed_devices": [d.id for d in snapshot.devices if d.health == "failed"],
    }


def jobs_spec(queue: tuple[Job, ...]) -> dict[str, Any]:
    return {"jobs": [{"name": j.name, "image": j.image, "submit_s": j.submit_s, "importance": j.importance,
                      "slo_s": j.slo_s, "wait_rounds": j.wait_rounds,
                      "tasks": {"count": j.tasks.count, "cpus": j.tasks.cpus, "memory_gb": j.tasks.memory_gb,
                                **dict(j.tasks.devices)}} for j in queue]}


def busiest_round(rounds: list[Round]) -> Round:
    """A round in the thick of it: running tasks, waiting jobs with W > 0, and some remote devices placed."""
    def score(r: Round) -> tuple[bool, bool, int, int]:
        remote = sum(p.remote_devices for p in r.decisions.placed)
        waits = max((j.wait_rounds for j in r.queue), default=0)
        return (bool(r.decisions.placed), remote > 0, len(r.snapshot.allocations), waits)
    return max(rounds, key=score)


@pytest.mark.parametrize("policy", ["drmaestro", "drmaestro-na", "firmament"])
def test_simulator_and_disagg_place_decide_the_same(policy: str, tmp_path: Path) -> None:
    sc = small_scenario(jobs=48)
    cluster = sc.cluster()
    rec = recording(policy)
    simulate(cluster, sc.submissions(1, cluster), rec, seed=1)
    chosen = busiest_round(rec.rounds)
    assert chosen.snapshot.allocations and any(j.wait_rounds > 0 for j in chosen.queue)
    # The same snapshot straight into a fresh policy object.
    direct = get_policy(policy).place(chosen.snapshot, chosen.queue, chosen.now, np.random.default_rng(0))
    assert direct.to_json()["placed"] == chosen.decisions.to_json()["placed"]
    # And through `disagg place`, from spec files.
    (tmp_path / "c.json").write_text(json.dumps(cluster_spec(chosen.snapshot)))
    (tmp_path / "j.json").write_text(json.dumps(jobs_spec(chosen.queue)))
    assert parse_cluster(cluster_spec(chosen.snapshot)).allocations == chosen.snapshot.allocations
    out = CliRunner().invoke(app, ["place", "--cluster", str(tmp_path / "c.json"), "--jobs",
                                   str(tmp_path / "j.json"), "--policy", policy, "--now", repr(chosen.now),
                                   "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["placed"] == chosen.decisions.to_json()["placed"]
    assert chosen.decisions.placed  # a round that decided something, not an empty comparison


def overcommit_problems(snapshot: Cluster) -> list[str]:
    """Everything in a snapshot that exceeds a capacity: cpus, memory, devices, link bandwidth."""
    problems = []
    cpu: dict[str, float] = defaultdict(float)
    mem: dict[str, float] = defaultdict(float)
    held: dict[str, str] = {}
    traffic: dict[str, float] = defaultdict(float)
    by_id = snapshot.device_by_id
    for a in snapshot.allocations:
        cpu[a.machine] += a.cpus
        mem[a.machine] += a.memory_gb
        for d in a.devices:
            if d in held:
                problems.append(f"{d} held by {held[d]} and {a.job}")
            held[d] = a.job
            if by_id[d].health != "healthy":
                problems.append(f"{d} is {by_id[d].health} but held by {a.job}")
        remote = [by_id[d].location for d in a.devices if by_id[d].location != a.machine]
        for loc in remote:
            for link in snapshot.path(a.machine, loc):
                traffic[link] += a.network_gbps / len(remote)
    for m in snapshot.machines:
        if cpu[m.name] > m.cpus + 1e-6 or mem[m.name] > m.memory_gb + 1e-6:
            problems.append(f"{m.name}: {cpu[m.name]} cpus, {mem[m.name]} GB in use")
    for link, gbps in traffic.items():
        if gbps > snapshot.link_by_id[link].gbps + 1e-6:
            problems.append(f"{link}: {gbps} Gb/s")
    return problems


@pytest.mark.parametrize("policy", list(POLICIES))
def test_no_policy_ever_overcommits_the_simulated_cluster(policy: str) -> None:
    sc = small_scenario(jobs=48)
    cluster = sc.cluster()
    rec = recording(policy)
    result = simulate(cluster, sc.submissions(2, cluster), rec, seed=2)
    assert result.conflicts == 0
    assert summarize(result, 2)["completed"] == 48
    for r in rec.rounds:
        assert overcommit_problems(r.snapshot) == []
    # Every running task shows up in the snapshot with its devices: GPUs in use never exceed the cluster's.
    assert max(result.gpu_in_use) <= result.total_gpus


def test_wait_rounds_rise_by_one_each_round_a_job_waits() -> None:
    sc = small_scenario(jobs=48)
    cluster = sc.cluster()
    rec = recording("firmament")
    simulate(cluster, sc.submissions(1, cluster), rec, seed=1)
    seen: dict[str, list[int]] = defaultdict(list)
    for r in rec.rounds:
        for j in r.queue:
            seen[j.name].append(j.wait_rounds)
    long_waiters = [w for w in seen.values() if len(w) > 3]
    assert long_waiters
    for w in seen.values():
        assert w == list(range(len(w)))


def test_fast_waited_matches_job_waited() -> None:
    job = Job("a", "rodinia/nw", TaskRequest(2, 2.0, 8.0, {"gpu": 1}), 1.5, 3.0, 99.0, 4, 2.5, ("x",))
    assert waited(job) == job.waited()
    assert waited(job, 3) == job.waited().waited().waited()


@pytest.mark.parametrize("policy", ["greedy", "random-remote", "fifo"])
def test_policies_that_ignore_w_decide_the_same_whether_the_engine_raises_it_or_not(policy: str) -> None:
    # The engine skips raising W for policies with reads_wait_rounds = False; the recording wrapper
    # lacks the attribute, so with it W is raised every round. Every decision must be the same.
    # Slow arrivals, so that waiting jobs differ in W (a greedy ordered by W fails this test).
    sc = replace(small_scenario(jobs=64), rate_per_s=0.5)
    cluster = sc.cluster()
    subs = sc.submissions(4, cluster)
    bare = get_policy(policy)
    assert getattr(bare, "reads_wait_rounds", True) is False
    rec = recording(policy)
    fast = simulate(cluster, subs, bare, seed=4)
    slow = simulate(cluster, subs, rec, seed=4)
    assert any(j.wait_rounds > 1 for r in rec.rounds for j in r.queue)  # W did rise on the slow side
    def key(r: SimResult) -> list[tuple[object, ...]]:
        return sorted((x.name, x.start_s, x.finish_s, x.gpus, x.remote_gpus) for x in r.records)
    assert key(fast) == key(slow)
    assert (fast.rounds, fast.conflicts, list(fast.gpu_in_use)) == (slow.rounds, slow.conflicts, list(slow.gpu_in_use))


def test_the_same_seed_gives_the_same_results() -> None:
    sc = small_scenario(jobs=48)
    cluster = sc.cluster()
    subs = sc.submissions(3, cluster)
    a = summarize(simulate(cluster, subs, get_policy("random-remote"), seed=3), 3)
    b = summarize(simulate(cluster, subs, get_policy("random-remote"), seed=3), 3)
    assert {k: v for k, v in a.items() if k not in WALL_KEYS} == {k: v for k, v in b.items() if k not in WALL_KEYS}


STARVED = {
    "machines": [
        {"name": "m0", "rack": "r0", "cpus": 20, "memory_gb": 512, "uplink_gbps": 10},
        {"name": "m1", "rack": "r0", "cpus": 20, "memory_gb": 512, "uplink_gbps": 10,
         "devices": {"gpu": {"count": 4, "model": "K80"}}},
    ],
    "allocations": [{"job": "hog", "machine": "m1", "cpus": 20, "memory_gb": 64}],
}


def nw_job(name: str, submit: float = 0.0) -> Submission:
    job = Job(name, "rodinia/nw", TaskRequest(1, 2.0, 8.0, {"gpu": 1}), submit_s=submit, slo_s=1000.0)
    return Submission(job, 200.0)


def exec_times(result: Any) -> dict[str, float]:
    return {r.name: r.finish_s - r.start_s for r in result.records}


def test_a_remote_gpu_on_an_idle_network_runs_at_the_profiles_remote_speed() -> None:
    cluster = parse_cluster(STARVED)
    result = simulate(cluster, [nw_job("solo")], get_policy("drmaestro"), seed=1)
    nw = lookup("nw")
    expected = 200.0 * ((1 - nw.transfer_share) + nw.transfer_share * nw.remote_factor)
    assert result.records[0].remote_gpus == 1
    assert exec_times(result)["solo"] == pytest.approx(expected)
    firm = simulate(cluster, [nw_job("solo")], get_policy("firmament"), seed=1, config=SimConfig(max_time_s=500))
    assert summarize(firm, 1)["completed"] == 0  # server-centric: the GPUs sit on a machine with no CPU left


def test_remote_traffic_on_a_shared_link_slows_both_jobs_until_one_ends() -> None:
    cluster = parse_cluster(STARVED)
    alone = exec_times(simulate(cluster, [nw_job("a")], get_policy("drmaestro"), seed=1))["a"]
    pair = exec_times(simulate(cluster, [nw_job("a"), nw_job("b", submit=0.0)], get_policy("drmaestro"), seed=1))
    assert pair["a"] > alone and pair["b"] > alone
    nw = lookup("nw")
    load = nw.network_gbps / 10.0  # the other job's traffic on the shared 10 Gb/s uplinks
    together = (1 - nw.transfer_share) + nw.transfer_share * nw.remote_factor * (1 + nw.load_sensitivity * load)
    together *= collocation_factor(2.0 / 20.0)  # and each holds 2 of m0's 20 cpus beside the other
    assert pair["a"] == pytest.approx(200.0 * together)  # both start and end together: the whole run is shared


def test_remote_memory_slows_down_as_legoos_reports() -> None:
    spec = {
        "machines": [{"name": "m0", "rack": "r0", "cpus": 8, "memory_gb": 64, "uplink_gbps": 100}],
        "pools": [{"name": "p0", "rack": "r0", "uplink_gbps": 100,
                   "devices": {"memory": {"count": 2, "capacity": 0.775, "model": "dram"}}}],
    }
    cluster = parse_cluster(spec)
    # 0.125 GB of local cache for a 0.9 GB working set: LegoOS's 128 MB point, 1.7x.
    job = Job("tf", "tensorflow/cifar10", TaskRequest(1, 4.0, 0.125, {"memory": 1}), slo_s=1000.0)
    result = simulate(cluster, [Submission(job, 100.0)], get_policy("drmaestro"), seed=1)
    assert exec_times(result)["tf"] == pytest.approx(170.0)


def test_failed_devices_abort_their_job_which_restarts_and_completes() -> None:
    sc = small_scenario(jobs=32, warmup_s=300.0)
    cluster = sc.cluster()
    config = SimConfig(failures=FailureModel(mtbf_s=1500.0, mttr_s=60.0))
    rec = recording("drmaestro")
    sim = Simulation(cluster, sc.submissions(1, cluster), rec, np.random.default_rng(1), config,
                     np.random.default_rng(2))
    result = sim.run()
    s = summarize(result, 1)
    assert result.counters["failures"] > 0 and s["restarts"] > 0
    assert s["completed"] == 32 and s["conflicts"] == 0
    for r in rec.rounds:
        assert overcommit_problems(r.snapshot) == []


@dataclass
class PlacingPolicy:
    """A policy that places what a function of the queue says (for the re-check's error paths)."""

    decide: Callable[[Sequence[Job]], tuple[JobPlacement, ...]]
    name: str = "fixed"

    def place(self, snapshot: Cluster, queue: Sequence[Job], now: float, rng: np.random.Generator,
              clock: Clock = no_clock, terms: FairTerms | None = None) -> Decisions:
        return Decisions(self.name, placed=self.decide(queue))


def gpu_task(job: str, machine: str, device: str, location: str, gbps: float = 0.0) -> TaskPlacement:
    remote = location != machine
    path = (f"up:{machine}", f"up:{location}") if remote else ()
    return TaskPlacement(f"{job}/0", machine, 2.0, 8.0, (DeviceGrant(device, "gpu", remote, location, path, gbps),))


@pytest.mark.parametrize(("placements", "started"), [
    # The same GPU twice in one round: the first job starts, the second is a conflict.
    (lambda q: tuple(JobPlacement(j.name, (gpu_task(j.name, "m0", "m1/gpu0", "m1"),)) for j in q), {"a"}),
    # A device that does not exist, a machine that does not exist.
    (lambda q: (JobPlacement("a", (gpu_task("a", "m0", "m1/gpu9", "m1"),)),
                JobPlacement("b", (replace(gpu_task("b", "m0", "m1/gpu1", "m1"), machine="m7"),))), set()),
    # Two remote GPUs that do not say their bandwidth draw their profile's (1.7 Gb/s) each: the second
    # would over-commit m0's 2.5 Gb/s uplink.
    (lambda q: tuple(JobPlacement(j.name, (gpu_task(j.name, "m0", f"m1/gpu{i}", "m1"),)) for i, j in enumerate(q)),
     {"a"}),
], ids=["device-twice", "unknown-device-and-machine", "bandwidth-from-the-profile"])
def test_placements_that_would_over_commit_are_refused_as_conflicts(
        placements: Callable[[Sequence[Job]], tuple[JobPlacement, ...]], started: set[str]) -> None:
    cluster = parse_cluster({**STARVED, "machines": [{**STARVED["machines"][0], "uplink_gbps": 2.5},  # type: ignore[dict-item]
                                                     STARVED["machines"][1]]})
    sim = Simulation(cluster, [nw_job("a"), nw_job("b")], PlacingPolicy(placements), np.random.default_rng(1),
                     SimConfig(max_time_s=1.0))
    result = sim.run()
    assert {r.name for r in result.records if r.start_s == r.start_s} == started
    assert result.conflicts == 2 - len(started)


@pytest.mark.parametrize(("truth_gbps", "job_gbps", "drawn"), [
    (None, None, 1.7),  # the shipped profile's (rodinia/nw), not the 1.0 the policy reserved
    (6.0, None, 6.0),   # the true profile's, past the 2.5 Gbit/s uplink the reservation fitted in
    (6.0, 3.0, 3.0),    # the job's own statement first
], ids=["shipped", "truth-past-the-link", "the-job-says"])
def test_a_remote_device_draws_its_jobs_true_bandwidth_whatever_the_policy_reserved(
        truth_gbps: float | None, job_gbps: float | None, drawn: float) -> None:
    """Truth apart from knowledge: a policy that knows an image wrongly (learned, neutral) reserves what
    it believes; the job draws what it really does, and its links carry that. The over-commit check
    reads the reservation, so the placement stands."""
    cluster = parse_cluster({**STARVED, "machines": [{**STARVED["machines"][0], "uplink_gbps": 2.5},  # type: ignore[dict-item]
                                                     STARVED["machines"][1]]})
    truth = None if truth_gbps is None else {"nw": replace(lookup("nw"), network_gbps=truth_gbps)}
    sub = nw_job("a")
    sub = replace(sub, job=replace(sub.job, network_gbps=job_gbps))
    placing = PlacingPolicy(lambda q: tuple(JobPlacement(j.name, (gpu_task(j.name, "m0", "m1/gpu0", "m1", 1.0),))
                                            for j in q))
    sim = Simulation(cluster, [sub], placing, np.random.default_rng(1), SimConfig(max_time_s=1.0, truth=truth))
    result = sim.run()
    assert result.conflicts == 0 and result.records[0].start_s == 0.0
    assert max(sim.state.link_used.values()) == pytest.approx(drawn)


@pytest.mark.parametrize(("model", "stretch"), [("K80", (0.83 + 0.17 * 1.17) * 1.025), ("P100", 1.025)],
                         ids=["k80-board-shared", "p100-links-apart"])
def test_collocated_gpu_jobs_share_a_k80_boards_pcie_link(model: str, stretch: float) -> None:
    # Two NW jobs (transfer share 0.17), each on one GPU of one machine and half its cpus: on a K80 board
    # the two GPUs share one PCIe link, so each transfer part stretches by the other's share of it.
    spec = {"machines": [{"name": "m0", "rack": "r0", "cpus": 8, "memory_gb": 64, "uplink_gbps": 10,
                          "devices": {"gpu": {"count": 2, "model": model}}}]}
    cluster = parse_cluster(spec)
    subs = [Submission(Job(f"nw{i}", "rodinia/nw", TaskRequest(1, 4.0, 8.0, {"gpu": 1}), slo_s=1000.0), 200.0)
            for i in range(2)]
    result = simulate(cluster, subs, get_policy("drmaestro"), seed=1)
    times = exec_times(result)
    assert times["nw0"] == pytest.approx(200.0 * stretch) and times["nw1"] == pytest.approx(200.0 * stretch)


def test_a_run_eases_the_collector_and_gives_back_what_it_found() -> None:
    """`collector_eased` raises the young threshold and freezes what exists for a run, then restores the
    thresholds; a caller's own frozen objects stay frozen (nothing of theirs is unfrozen)."""
    import gc

    from tests.frozen import is_frozen

    from disagg.sim.engine import SIM_GC_THRESHOLD, collector_eased

    thresholds = gc.get_threshold()
    mine = [[]]  # one of the caller's objects
    gc.freeze()
    try:
        assert is_frozen(mine)
        with collector_eased():
            assert gc.get_threshold()[0] == SIM_GC_THRESHOLD
        assert gc.get_threshold() == thresholds
        assert is_frozen(mine)
    finally:
        gc.unfreeze()
    with collector_eased():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("policy", ["drmaestro", "drmaestro-na", "firmament"])
def test_flow_policies_decide_the_same_with_w_kept_apart(policy: str) -> None:
    # A flow policy says it reads W off a WaitingQueue: the engine then keeps W apart and copies a job
    # with its W only when it starts. The recording wrapper lacks the
    # attribute, so through it the engine raises W on every queued job each round. Every decision and
    # every W a round reads must be the same (the unscheduled arcs and the reasons price and name W).
    sc = replace(small_scenario(jobs=64), rate_per_s=0.5)
    cluster = sc.cluster()
    subs = sc.submissions(4, cluster)
    bare = get_policy(policy)
    assert getattr(bare, "reads_waiting_queue", False) is True
    seen: list[Decisions] = []
    original = bare.place

    def spy(*args: Any, **kwargs: Any) -> Decisions:
        assert isinstance(args[1], WaitingQueue)
        seen.append(original(*args, **kwargs))
        return seen[-1]

    bare.place = spy  # type: ignore[method-assign]
    rec = recording(policy)
    fast = simulate(cluster, subs, bare, seed=4)
    slow = simulate(cluster, subs, rec, seed=4)
    assert any(j.wait_rounds > 1 for r in rec.rounds for j in r.queue)
    assert [d.to_json() | {"timings": {}} for d in seen] == [r.decisions.to_json() | {"timings": {}}
                                                            for r in rec.rounds]
    def key(r: SimResult) -> list[tuple[object, ...]]:
        return sorted((x.name, x.start_s, x.finish_s, x.gpus, x.remote_gpus) for x in r.records)
    assert key(fast) == key(slow)


def test_a_waiting_queue_places_as_its_current_jobs() -> None:
    # The flow round reads the W of the jobs it admits off the queue's `wait_rounds`; with fair-share
    # terms (fair order reads every job's W) it raises every job's first. Either way: as the current jobs.
    sc = small_scenario(jobs=48)
    cluster = sc.cluster()
    rec = recording("drmaestro-na")
    simulate(cluster, sc.submissions(1, cluster), rec, seed=1)
    chosen = busiest_round(rec.rounds)
    stale = [replace(j, wait_rounds=0) for j in chosen.queue]
    by_name = {j.name: j for j in chosen.queue}
    waiting = WaitingQueue(stale, lambda j: by_name[j.name].wait_rounds)
    for terms in (None, {"alice": 0.5, "bob": 0.0}):
        a = get_policy("drmaestro-na").place(chosen.snapshot, waiting, chosen.now, np.random.default_rng(0),
                                             terms=terms)
        b = get_policy("drmaestro-na").place(chosen.snapshot, list(chosen.queue), chosen.now,
                                             np.random.default_rng(0), terms=terms)
        assert a.to_json() | {"timings": {}} == b.to_json() | {"timings": {}}


@pytest.mark.parametrize("policy", ["drmaestro", "drmaestro-na", "firmament"])
def test_a_simulated_round_makes_why_jobs_wait_only_when_read(policy: str) -> None:
    # The simulator reads why jobs wait only of its last round (a stalled run's report): its queue says
    # so, and a flow round then leaves the reasons to be made when read, after the round is over. They
    # are the ones the round gives at once; without the flag they are made at once.
    sc = small_scenario(jobs=48)
    cluster = sc.cluster()
    rec = recording(policy)
    simulate(cluster, sc.submissions(1, cluster), rec, seed=1)
    chosen = max(rec.rounds, key=lambda r: (len(r.decisions.unplaced), len(r.decisions.placed)))
    def waiting(later: bool) -> WaitingQueue:
        return WaitingQueue(chosen.queue, attrgetter("wait_rounds"), reasons_later=later)
    at_once = get_policy(policy).place(chosen.snapshot, waiting(False), chosen.now, np.random.default_rng(0))
    later = get_policy(policy).place(chosen.snapshot, waiting(True), chosen.now, np.random.default_rng(0))
    assert isinstance(at_once.unplaced, tuple) and len(at_once.unplaced) > 0
    assert isinstance(later.unplaced, LaterReasons)
    assert later.placed == at_once.placed
    assert [(u.job, u.reason, u.message) for u in later.unplaced] == [
        (u.job, u.reason, u.message) for u in at_once.unplaced]
    assert later.to_json() | {"timings": {}} == at_once.to_json() | {"timings": {}}
    assert len(later.unplaced) == len(at_once.unplaced) and later.unplaced[0] == at_once.unplaced[0]


def test_snapshots_keep_the_inventorys_indexes_until_a_device_changes() -> None:
    # Each round's snapshot is the inventory with what runs now (`Cluster.with_allocations`): the
    # indexes a round worked out are kept, and dropped when a device's health changes.
    from disagg.model.states import DEVICE_FAILED
    from disagg.sim.simcluster import SimCluster

    cluster = small_scenario(jobs=4).cluster()
    sim = SimCluster(cluster)
    first = sim.snapshot()
    by_id = first.device_by_id
    sim.allocations["t"] = Allocation("j", cluster.machines[0].name, 1.0, 1.0)
    second = sim.snapshot()
    assert second.device_by_id is by_id and second.allocations == (sim.allocations["t"],)
    assert first.allocations == ()
    sim.set_health(0, DEVICE_FAILED)
    third = sim.snapshot()
    assert third.device_by_id[cluster.devices[0].id].health == DEVICE_FAILED
    assert third.allocations == second.allocations


@pytest.mark.parametrize("seed", range(300))
def test_fits_answers_as_over_commit_does(seed: int) -> None:
    """`SimCluster.fits` (the engine's re-check) against `commit.over_commit` of the placement as
    reserved (`_as_reserved`): the same yes or no for random placements on a cluster partly in use,
    some devices held or failed, needs at and around what is free (the `EPS` edge), devices named
    twice, paths and bandwidths given or left to the simulator."""
    rng = random.Random(seed)
    scenario = get_scenario("paper-16m-512j")
    cluster = scenario.cluster()
    job = scenario.submissions(1, cluster)[rng.randrange(64)].job
    sim = Simulation(cluster, [], get_policy("greedy"), np.random.default_rng(0))
    st = sim.state
    for m in range(len(st.machines)):
        st.cpu_free[m] = rng.choice([0.0, 1.0, rng.uniform(0.0, st.machines[m].cpus)])
        st.mem_free[m] = rng.choice([0.0, rng.uniform(0.0, st.machines[m].memory_gb)])
    for lk in st.link_used:
        st.link_used[lk] = rng.choice([0.0, rng.uniform(0.0, st.link_cap[lk]), st.link_cap[lk]])
    for d in rng.sample(range(len(st.devices)), 6):
        if rng.random() < 0.5:
            st.holder[d] = "other"
        else:
            st.set_health(d, DEVICE_FAILED)

    def near(free: float) -> float:  # at, under or over what is free, by about EPS
        return max(0.0, free + rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0, 100.0]) * EPS * rng.choice([0.0, 1.0, 1e3]))

    tasks = []
    for i in range(job.tasks.count):
        machine = rng.choice(st.machines).name
        m = st.m_index[machine]
        grants = []
        for _ in range(rng.randint(0, 3)):
            dev = rng.choice(st.devices) if rng.random() < 0.8 or not grants else st.devices[st.d_index[grants[0].id]]
            remote = dev.location != machine
            path = cluster.path(machine, dev.location) if remote and rng.random() < 0.8 else ()
            left = min((st.link_cap[lk] - st.link_used[lk] for lk in cluster.path(machine, dev.location)), default=0.0)
            gbps = rng.choice([0.0, rng.uniform(0.0, 10.0), near(left), left + EPS / 2]) if remote else 0.0
            grants.append(DeviceGrant(dev.id, dev.kind, remote, dev.location, path, gbps))
        share = rng.choice([1.0, 0.5, 0.25, 0.0])  # (0: the links and devices decide)
        tasks.append(TaskPlacement(f"t{i}", machine, near(st.cpu_free[m] * share), near(st.mem_free[m] * share),
                                   tuple(grants)))
    jp = JobPlacement(job.name, tuple(tasks))
    sim_tasks = sim._tasks(jp, job)
    assert sim_tasks is not None
    assert st.fits(jp, sim_tasks) == (over_commit(_as_reserved(jp, sim_tasks), st) is None)


@pytest.mark.parametrize("policy", ["drmaestro", "drmaestro-na", "firmament"])
def test_a_last_readmission_left_for_when_read_decides_as_one_made_at_once(policy: str) -> None:
    """A simulated round leaves its last iteration's re-admission for when its reasons or stats are read
    (`FlowPlacer._readmit_later`): in every round of a run, read after the round is over, both are those
    of the same round made at once (placements, reasons and stats); and such rounds happen."""
    scenario = get_scenario("paper-16m-512j")
    cluster = scenario.cluster()
    inner = get_policy(policy)
    counted = {"rounds": 0, "later": 0}

    class Both:
        name = policy
        reads_waiting_queue = True

        def place(self, snapshot, queue, now, rng, clock=None, terms=None):  # type: ignore[no-untyped-def]
            later = inner.place(snapshot, queue, now, np.random.default_rng(0))
            at_once = inner.place(snapshot, WaitingQueue(list(queue), queue.wait_rounds), now,
                                  np.random.default_rng(0))
            counted["rounds"] += 1
            if isinstance(later.stats, LaterStats):
                counted["later"] += 1
                assert isinstance(later.unplaced, LaterReasons) or not later.unplaced
            assert later.placed == at_once.placed
            assert [(u.job, u.reason, u.message) for u in later.unplaced] == [
                (u.job, u.reason, u.message) for u in at_once.unplaced]
            assert dict(later.stats) == dict(at_once.stats)
            return later

    simulate(cluster, scenario.submissions(1, cluster), Both(), 1, SimConfig(interval_s=5.0))  # type: ignore[arg-type]
    assert counted["rounds"] > 20 and counted["later"] > 0


def test_a_job_submitted_after_ten_million_seconds_is_simulated_and_a_run_cut_short_counts_every_job() -> None:
    """`max_time_s` was a fixed 10⁷ s (116 days): a longer trace (Helios spans six months) lost its later
    jobs from every result, with "done 1/1" for a trace of two. It now runs until 10⁷ s after the last
    submission; and a run stopped by its limit still counts the jobs it never submitted, as not completed."""
    cluster = parse_cluster(STARVED)
    late = simulate(cluster, [nw_job("early"), nw_job("late", submit=2e7)], get_policy("drmaestro"), seed=1)
    assert summarize(late, 1)["jobs"] == summarize(late, 1)["completed"] == 2
    assert {r.name: r.finish_s > 2e7 for r in late.records} == {"early": False, "late": True}
    cut = simulate(cluster, [nw_job("early"), nw_job("late", submit=2e7)], get_policy("drmaestro"), seed=1,
                   config=SimConfig(max_time_s=1e6))
    assert (summarize(cut, 1)["jobs"], summarize(cut, 1)["completed"]) == (2, 1)
    with pytest.raises(ValueError, match="max_time_s: value nan is not allowed"):
        SimConfig(max_time_s=float("nan"))
