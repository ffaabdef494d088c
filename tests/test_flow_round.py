"""The flow round's structure: which class prices a shape's machines (the 1b066c6 regression)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from disagg.placement.flow import FlowPlacer, _RoundJobCache
from disagg.placement.phase_one import classify, shape_representative
from disagg.profiles import RODINIA
from tests.builders import make_job


def _classes(slos: list[float], as_given: bool = False):  # type: ignore[no-untyped-def]
    """The classes of jobs of one shape with these SLOs; `as_given`: with τ the SLO itself, where a job's
    own is never below its best time (`cost.goal_s`)."""
    cache = _RoundJobCache()
    jobs = [FlowPlacer._job_state(make_job(f"j{i}", gpu=4, slo_s=s), i, cache) for i, s in enumerate(slos)]
    if as_given:
        for js, s in zip(jobs, slos, strict=True):
            js.tau = s
    return classify(jobs)


def test_a_shape_is_priced_for_its_first_class_whose_goal_is_met_not_for_its_loosest() -> None:
    """Pricing every shape for its loosest goal (741bd7c, merged at 1b066c6) sent tighter classes' tasks
    remote through the aggregator: 9,679 of 10,000 jobs placed at 12,500 machines, in three phase-1
    solves. The first class in queue order prices the shape, as before that commit..."""
    base = RODINIA["nw"].base_s
    cls = _classes([base * 1.2, base * 2.0, base * 50.0])
    assert len(cls.shapes) == 1 and len(cls.shapes[0]) == 3
    assert shape_representative(cls, cls.shapes[0]) == 0


def test_a_class_whose_goal_no_placement_meets_does_not_price_its_shape() -> None:
    """... unless no placement meets its goal (a τ below the job's local time): then the next class that
    is met does; when none is, the loosest. A job's own SLO never makes such a goal: a tenant's SLO of a
    millisecond is read as the job's local time (`cost.goal_s`), which its first class then meets."""
    base = RODINIA["nw"].base_s
    cls = _classes([0.001, base * 1.5, base * 2.0], as_given=True)
    assert shape_representative(cls, cls.shapes[0]) == 1
    cls = _classes([0.001, 0.01, 0.002], as_given=True)
    assert shape_representative(cls, cls.shapes[0]) == 1
    cls = _classes([0.001, base * 1.5, base * 2.0])
    assert shape_representative(cls, cls.shapes[0]) == 0


def test_bench_placement_sets_the_round_against_a_bare_solve_of_a_firmament_graph() -> None:
    from disagg.bench.placement import BARE_PREFERRED, firmament_graph, run_placement_bench
    from disagg.bench.synthetic import rodinia_queue, synthetic_cluster

    cluster, queue = synthetic_cluster(80, 4, 1), rodinia_queue(60, 1)
    tails, heads, caps, costs, supplies = firmament_graph(cluster, queue, 1)
    tasks = sum(j.tasks.count for j in queue)
    assert len(tails) == len(heads) == len(caps) == len(costs) == tasks * (2 + BARE_PREFERRED) + 2 * 80 + 1
    assert supplies.sum() == 0 and supplies[:tasks].tolist() == [1] * tasks
    out = run_placement_bench(80, 4, 60, "drmaestro", 1)
    assert out["bare_solve_s"] > 0 and out["round_over_bare"] > 0
    assert out["machine"]["python_ms"] > 0 and out["machine"]["numpy_call_us"] > 0
    assert out["cold_round_cpu_s"] > 0  # the first round on the inventory, reported beside the kept ones
    assert run_placement_bench(80, 4, 0, "drmaestro", 1)["placed"] == 0


def test_bench_placement_with_a_learned_table_tells_the_round_each_images_profile() -> None:
    """`bench placement --learned-images N` (issue 26): every job an image of a table of N, each a variant
    of its own Rodinia app within 10%, so that the round's work is the same kind and only the table grew."""
    from disagg.bench.placement import run_placement_bench
    from disagg.bench.synthetic import rodinia_queue, with_learned_profiles
    from disagg.profiles import RODINIA

    queue = rodinia_queue(200, 1)
    learned = with_learned_profiles(queue, 40, 1)
    assert [j.name for j in learned] == [j.name for j in queue]
    assert len({j.image for j in learned}) > 13  # more images than the shipped table has
    for before, after in zip(queue, learned, strict=True):
        app = RODINIA[before.image.rsplit("/", 1)[-1]]
        assert after.profile is not None and after.image == f"learned/{after.profile.name}"
        assert 0.9 * app.base_s <= after.profile.base_s <= 1.1 * app.base_s
    out = run_placement_bench(80, 4, 60, "drmaestro-na", 1, learned_images=40)
    assert out["learned_images"] == 40 and out["round_cpu_s"] > 0 and out["shipped_round_cpu_s"] > 0
    assert 0 < out["placed"] <= 60 and 0 < out["shipped_placed"] <= 60


def test_machines_of_equal_free_state_are_one_class_taken_in_turn_across_racks() -> None:
    import numpy as np

    from disagg.placement.phase_one import MachineGroups

    cpu = np.array([4.0, 8.0, 4.0, 4.0, 8.0, 4.0])
    rack = np.array([0, 0, 0, 1, 1, 1])
    groups = MachineGroups.of([cpu, np.zeros(6)], rack)
    assert len(groups.first) == 2
    four, eight = groups.of_machine[0], groups.of_machine[1]
    assert groups.members[four] == [0, 3, 2, 5]  # rack 0, rack 1, rack 0, rack 1
    assert groups.members[eight] == [1, 4]
    assert sorted(groups.first.tolist()) == [0, 1]
    totals = groups.total(np.array([1, 2, 1, 1, 2, 1]))
    assert totals[four] == 4 and totals[eight] == 4


def test_a_task_is_settled_on_its_own_devices_only_where_they_serve_every_task_asking_there() -> None:
    import numpy as np

    from disagg.placement.phase_device import Tasks, settled_locally

    n = 3
    tasks = Tasks(jobs=[], job_at=[0, 1, 2], task_index=[0, 0, 0], own=np.array([0, 0, 1]),
                  want=np.array([2, 2, 2]), tau=np.ones(n), z=np.ones(n), gbps=np.ones(n), phi_local=np.ones(n),
                  u_cost=np.full(n, 100), pinned=np.full(n, -1), params=(), guard=np.zeros(n, dtype=np.int64),
                  own_up=np.zeros(n), own_rack=np.zeros(n))
    free = np.array([[3], [2]])
    local = np.array([10, 10, 10])
    remote = np.array([20, 20, 5])
    # Machine 0 has 3 free for 4 asked: neither task is settled; machine 1's task is cheaper remote.
    assert settled_locally(tasks, free, 2, local, remote).tolist() == [False, False, False]
    assert settled_locally(tasks, free, 2, local, np.array([20, 20, 20])).tolist() == [False, False, True]
    assert settled_locally(tasks, np.array([[4], [2]]), 2, local, np.array([20, 20, 20])).all()
    # Waiting costs less than the local devices: the flow decides.
    assert not settled_locally(tasks, np.array([[4], [2]]), 2, np.full(3, 200), np.full(3, 300)).any()


def test_a_round_at_some_hundred_machines_is_valid_for_every_flow_policy() -> None:
    from disagg.bench.synthetic import rodinia_queue, synthetic_cluster
    from tests.harness import PlacementHarness

    cluster, queue = synthetic_cluster(400, 4, 3), rodinia_queue(700, 3)
    for policy in ("drmaestro", "drmaestro-na", "firmament"):
        decisions = PlacementHarness(cluster, queue).run(policy)
        assert len(decisions.placed) > 500, policy


def test_the_flow_placer_keeps_nothing_of_a_round() -> None:
    """A round's state is one FlowRound value per place() (it was kept on the placer: the queue length,
    the job table, the fair-share bonus and the first iteration's fit of the last round)."""
    from disagg.bench.synthetic import rodinia_queue, synthetic_cluster
    from disagg.placement.flow import FlowOptions

    placer = FlowPlacer(FlowOptions("drmaestro", "drmaestro"))
    before = dict(vars(placer))
    placer.place(synthetic_cluster(40, 4, 1), rodinia_queue(30, 1), 0.0)
    assert vars(placer) == before
    assert set(vars(placer)) == {"options", "costs", "graphs"}


#: What admission's refusals say (`queue._Admission.consider`): jobs the round did not admit.
_ADMISSION_SAYS = ("after the jobs ahead of it in the queue", "fit now (most free on one machine")


def test_a_phase_that_fits_nowhere_decides_as_its_network_would() -> None:
    """A phase 1 that no shape of its jobs fits (`FlowPlacer._nowhere`: no network, re-admitted jobs
    without job states, and where the phase before it fitted nowhere too, no second look at the keys it
    failed) decides what the network and its decoder decide: the same placements, reasons, messages and
    stats in every round of a server-centric run whose free devices sit in pools. The networks are always
    built where they are kept (`keep_graphs`), so that placer is the reference."""
    from disagg.placement.registry import get_policy
    from disagg.sim.engine import SimConfig, simulate
    from disagg.sim.scenarios import get_scenario

    scenario = get_scenario("paper-16m-512j")
    cluster = scenario.cluster()
    reference = get_policy("firmament")
    reference.keep_graphs()  # type: ignore[attr-defined]
    fast = get_policy("firmament")
    rounds = {"all": 0, "nowhere": 0, "asked": 0}
    placer = fast._placer  # type: ignore[attr-defined]
    nowhere, asked = placer._nowhere, placer._fits_nowhere

    def counted(*args):  # type: ignore[no-untyped-def]
        found = nowhere(*args)
        rounds["nowhere"] += found
        return found

    def counted_ask(*args):  # type: ignore[no-untyped-def]
        found = asked(*args)
        rounds["asked"] += found[1]
        return found

    placer._nowhere, placer._fits_nowhere = counted, counted_ask

    class Both:
        name = "firmament"
        reads_waiting_queue = True

        def place(self, snapshot, queue, now, rng, clock=None, terms=None):  # type: ignore[no-untyped-def]
            want = reference.place(snapshot, queue, now, rng)
            got = fast.place(snapshot, queue, now, rng)
            assert (got.placed, got.unplaced, got.stats) == (want.placed, want.unplaced, want.stats)
            # Every job admitted (a job state or not) is placed or says why the round could not place it;
            # the others say what admission refused them for.
            refused = sum(1 for u in got.unplaced if any(said in u.message for said in _ADMISSION_SAYS))
            assert got.stats["admitted"] == len(queue) - refused
            rounds["all"] += 1
            return got

    simulate(cluster, scenario.submissions(1, cluster)[:200], Both(), 1, SimConfig(interval_s=5.0))  # type: ignore[arg-type]
    assert rounds["all"] > 20 and rounds["nowhere"] > 20
    # Some of those phases were answered by what the phase before them found (`FlowRound.nowhere_said`).
    assert 0 < rounds["asked"] < rounds["nowhere"]


def test_classes_are_numbered_as_they_first_appear_each_with_its_first_job() -> None:
    """`classify` hashes each job's key once (the place of its class's first job): interleaved classes
    still number in order of first appearance, each represented by its first job, and every job of a
    class gets its number."""
    slos = [230.0, 260.0, 230.0, 290.0, 260.0, 230.0, 290.0, 320.0]  # (above nw's 200 s: each its own goal)
    cls = _classes(slos)
    first: dict[float, int] = {}
    for i, s in enumerate(slos):
        first.setdefault(s, i)
    numbers = {s: c for c, s in enumerate(first)}
    assert cls.of_job.tolist() == [numbers[s] for s in slos]
    assert [js.order for js in cls.representative] == list(first.values())
    assert cls.tasks.tolist() == [slos.count(s) for s in first]  # one task each


def test_a_device_phase_counts_the_traffic_a_job_took_earlier_in_the_round_and_none_before_any() -> None:
    """`_tasks` looks for jobs holding traffic of the round only once the free state has taken some
    (`FreeState.traffic_takes`): a job that took traffic has it counted on its task's uplink; a round
    that took none counts none, without the look."""

    from disagg.placement.cost_models import get_cost_model
    from disagg.placement.jobstate import JobTable
    from disagg.placement.phase_device import _tasks
    from disagg.placement.state import FreeState
    from tests.builders import make_cluster

    state = FreeState(make_cluster(machines=4, gpus=4))
    cache = _RoundJobCache()
    jobs = [FlowPlacer._job_state(make_job(f"j{i}"), i, cache) for i in range(2)]
    for js, m in zip(jobs, (0, 1), strict=True):
        js.machines.append(m)
    table = JobTable.of(jobs)
    costs = get_cost_model("drmaestro-na")
    before = _tasks(state, jobs, "gpu", ["K80"], costs, 2, table)
    assert state.traffic_takes == 0 and not before.own_up.any() and not before.own_rack.any()
    path = state.path(1, 2)
    assert state.take_traffic(path, 5.0, jobs[1]) and state.traffic_takes == 1
    after = _tasks(state, jobs, "gpu", ["K80"], costs, 2, table)
    assert after.own_up.tolist() == [0.0, 5.0 if 1 in path else 0.0]
    assert after.own_up[1] > 0 or after.own_rack[1] > 0


def test_job_states_made_in_one_loop_are_those_made_one_by_one() -> None:
    """`_job_states` (one loop over the admitted jobs, the cache in locals) makes what `_job_state` makes
    job by job: jobs sharing a request object, requests written differently, an unknown image, SLOs
    missing, NaN or out of range, and a round's W."""
    from dataclasses import fields, replace

    from disagg.model import TaskRequest

    shared = TaskRequest(2, 4.0, 16.0, {"gpu": 1})
    jobs = [make_job("a"), replace(make_job("b"), tasks=shared), replace(make_job("c"), tasks=shared),
            replace(make_job("d", slo_s=None), image="unknown/x"), make_job("e", slo_s=float("nan")),
            replace(make_job("f"), tasks=TaskRequest(1, 4.0, 16.0, {"nvme": 0, "gpu": 1})),
            make_job("g", slo_s=1e9, importance=float("nan"), wait_rounds=3), make_job("h", slo_s=1e-9)]
    orders = [5, 1, 2, 7, 3, 4, 6, 0]

    def made(one_by_one: bool) -> list[tuple[object, ...]]:
        cache = _RoundJobCache(wait_rounds=lambda job: len(job.name) + 1)
        states = ([FlowPlacer._job_state(j, o, cache) for j, o in zip(jobs, orders, strict=True)] if one_by_one
                  else FlowPlacer._job_states(jobs, orders, cache))
        shapes = {id(js.shape): k for k, js in reversed(list(enumerate(states)))}  # shapes by identity
        return [tuple(shapes[id(v)] if f.name == "shape" else repr(v) for f in fields(js)
                      for v in [getattr(js, f.name)]) for js in states]

    assert made(True) == made(False)
    states = FlowPlacer._job_states(jobs, orders, _RoundJobCache())
    assert states[1].shape is states[2].shape is states[5].shape  # one shape per request, however written


def test_a_model_allowing_every_machine_answers_one_read_only_array_a_round() -> None:
    """The decoder's repairs ask the cost model for the machines a task may go to; a model allowing
    all answers the free state's one array of them (not a new one per repair), which nothing may write."""
    import numpy as np
    import pytest

    from disagg.placement.cost_models import get_cost_model
    from disagg.placement.state import FreeState
    from tests.builders import make_cluster

    state = FreeState(make_cluster(machines=5, gpus=2))
    js = FlowPlacer._job_state(make_job("a"), 0, _RoundJobCache())
    for name in ("drmaestro", "drmaestro-na"):
        mask, machines = get_cost_model(name).machines_allowed(state, js)
        assert mask is None and machines is state.all_machines
    assert state.all_machines.tolist() == list(range(state.n_machines))
    with pytest.raises(ValueError):
        state.all_machines[0] = 3
    assert np.array_equal(FreeState(make_cluster(machines=5, gpus=2)).all_machines, state.all_machines)


def test_a_job_states_goal_is_its_slo_clamped_as_clamp_goal_clamps_it() -> None:
    """`_job_states` clamps τ with comparisons in place of `clamp_goal`'s min and max, and raises a goal
    below a known image's local time to it, as `goal_s` does: the same value, and of the same type, at the
    bounds, beyond them, for ints, infinities and NaN; for an unknown image (no local time: the SLO as
    clamped) and a known one (nw, 200 s)."""
    import math

    from disagg.placement.cost import TAU_MAX_S, TAU_MIN_S, clamp_goal, goal_s, profile_of

    slos = [TAU_MIN_S, TAU_MAX_S, TAU_MIN_S / 2, TAU_MAX_S * 2, 1e-12, 0.0, -5.0, 7, int(TAU_MAX_S) + 1,
            math.inf, -math.inf, float("nan"), 123.456, 200, 200.5]
    for image in ("tests/unknown", "rodinia/nw"):
        jobs = [make_job(f"j{i}", image, slo_s=s) for i, s in enumerate(slos)]
        states = FlowPlacer._job_states(jobs, range(len(slos)), _RoundJobCache())
        for js, job, s in zip(states, jobs, slos, strict=True):
            want = goal_s(job, profile_of(job))
            assert repr(js.tau) == repr(want) and type(js.tau) is type(want), (image, s)
            assert want == (clamp_goal(s) if image == "tests/unknown" else max(clamp_goal(s), 200.0)), (image, s)


def test_a_job_states_written_out_init_starts_every_other_field_as_declared() -> None:
    """`RoundJob.__init__` is written out (no factory calls): every field it does not take starts at its
    declared default, each list its own, and every declared field is set."""
    from dataclasses import MISSING, fields

    from disagg.placement.jobstate import RoundJob

    a, b = (RoundJob(make_job("a"), 0, None, 1.0, 1.0, 1.0, 1.0, (), {}, 1, 4.0, 16.0, 0) for _ in range(2))
    for f in fields(RoundJob):
        value = getattr(a, f.name)  # (every slot set: an unset one raises)
        if f.init:
            continue
        declared = f.default if f.default is not MISSING else f.default_factory()
        assert value == declared and type(value) is type(declared), f.name
        if isinstance(value, list):
            assert value is not getattr(b, f.name), f.name


def test_a_phase_looks_at_its_first_shape_first_and_at_the_rest_only_when_that_fits_nowhere() -> None:
    """`fits_nowhere` looks at the first shape of its jobs alone first (its last job, at the least gbps
    of its jobs): when it fits, the phase is built with that fit known and nothing else looked at; when
    it does not, every shape is looked at as before, and only when none fits do the jobs fail."""
    from dataclasses import replace

    import numpy as np

    from disagg.placement.cost_models import get_cost_model
    from disagg.placement.phase_one import fits_nowhere, shape_fit
    from disagg.placement.state import FreeState
    from tests.builders import make_cluster

    state = FreeState(make_cluster(machines=3, gpus=2))
    costs = get_cost_model("drmaestro")
    local_free = {k: state.local_free(k) for k in state.kinds}
    cache = _RoundJobCache()
    small = [replace(make_job(f"s{i}", cpus=2), network_gbps=g) for i, g in enumerate((8.0, 2.0, 5.0))]
    huge = [make_job(f"h{i}", cpus=10_000) for i in range(2)]
    states = FlowPlacer._job_states(small + huge, range(5), cache)
    fits, nowhere = states[:3], states[3:]
    known: dict[int, np.ndarray] = {}
    assert not fits_nowhere(state, fits + nowhere, costs, {}, known)
    assert list(known) == [id(fits[0].shape)]  # the first shape fits: nothing else looked at
    assert np.array_equal(known[id(fits[0].shape)], shape_fit(state, fits[2], costs, local_free, 2.0))
    known = {}
    assert not fits_nowhere(state, nowhere + fits, costs, {}, known)
    assert list(known) == [id(nowhere[0].shape), id(fits[0].shape)] and not known[id(nowhere[0].shape)].any()
    assert all(js.failure is None for js in states)
    first_fit: dict[int, int] = {}
    assert fits_nowhere(state, nowhere, costs, first_fit, {})
    assert first_fit == {id(nowhere[0].shape): 0} and all(js.failure is not None for js in nowhere)


def test_taking_cpus_along_offers_tries_the_front_offer_first_and_scans_as_before() -> None:
    """`take_cpu_along` tries the front offer with tasks left first (most tasks fit it); otherwise that
    offer is spent and the scan goes on within `limit` offers from the front, list after list: the
    same machine, spent offers and journal as a plain scan, on random offers and free states."""
    import random

    from disagg.placement.commit import EPS
    from disagg.placement.state import FreeState, Journal, Offers
    from tests.builders import make_cluster

    def plain(cpu: list[float], mem: list[float], offered: list[list[list[int]]], starts: list[int],
              cpus: float, memory: float, limit: int) -> int:
        for lst, entries in enumerate(offered):
            start = starts[lst]
            while start < len(entries) and entries[start][1] == 0:
                start += 1
            starts[lst] = start
            for offer in entries[start:start + limit]:
                if offer[1] == 0:
                    continue
                m = offer[0]
                if cpus > cpu[m] + EPS or memory > mem[m] + EPS:
                    offer[1] = 0
                    continue
                cpu[m] -= cpus
                mem[m] -= memory
                offer[1] -= 1
                return m
        return -1

    rng = random.Random(7)
    for _ in range(300):
        state = FreeState(make_cluster(machines=6, gpus=1))
        state.cpu[:] = [rng.choice((0.0, 1.0, 2.0, 4.0, 8.0)) for _ in range(6)]
        state.mem[:] = 64.0
        lists = [[[rng.randrange(6), rng.randrange(3)] for _ in range(rng.randrange(5))] for _ in range(2)]
        mine = tuple(Offers([list(e) for e in entries]) for entries in lists)
        ref, ref_starts = [[list(e) for e in entries] for entries in lists], [0, 0]
        cpu, mem = state.cpu.tolist(), state.mem.tolist()
        journal, taken = Journal(), []
        for _ in range(4):
            cpus, limit = rng.choice((1.0, 2.0, 3.0)), rng.choice((0, 1, 2, 8))
            want = plain(cpu, mem, ref, ref_starts, cpus, 4.0, limit)
            assert state.take_cpu_along(mine, cpus, 4.0, journal, limit) == want
            assert [o.entries for o in mine] == ref and state.cpu.tolist() == cpu
            taken += [(want, cpus, 4.0)] if want >= 0 else []
        assert journal.taken_cpu == taken


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.booleans(), st.integers(1, 8), st.data())
def test_the_decoder_reads_each_tasks_flows_as_the_block_by_block_reads_did(n_models: int, remote: bool, n_tasks: int,
                                                                           data: st.DataObject) -> None:
    """`_given` (a model's local, rack and cross-rack blocks read as one slice) against reading each block
    in turn, local ones of every model first, then rack, then cross: the same entries in the same order."""
    import numpy as np

    from disagg.placement.network import FlowNetwork
    from disagg.placement.phase_device import DevicePhase, _given

    def subset() -> np.ndarray:
        return np.array(sorted(data.draw(st.sets(st.integers(0, n_tasks - 1)))), dtype=np.int64)

    net = FlowNetwork()
    net.add_nodes(2 * n_tasks + 2)
    net.add_arcs("task->U", np.arange(n_tasks), 2 * n_tasks, 1, 0)
    sels: dict[str, list[np.ndarray]] = {"local": [], "rack": [], "cross": []}
    for mi in range(n_models):
        for source in ("local", "rack", "cross") if remote else ("local",):
            sel = subset()
            net.add_arcs(f"{source}:{mi}", sel, n_tasks + sel, 1, 0)
            sels[source].append(sel)
        net.add_arcs(f"loc->sink:{mi}", [n_tasks], 2 * n_tasks + 1, 1, 0)
    flows = np.array(data.draw(st.lists(st.integers(0, 3), min_size=net.num_arcs, max_size=net.num_arcs)),
                     dtype=np.int64)
    done = np.array(data.draw(st.lists(st.booleans(), min_size=n_tasks, max_size=n_tasks)), dtype=bool)
    empty = np.zeros(0, dtype=np.int64)
    phase = DevicePhase("gpu", net, None, [f"m{i}" for i in range(n_models)],  # type: ignore[arg-type]
                        object() if remote else None, empty, empty,  # type: ignore[arg-type]
                        local_sel=sels["local"], rack_sel=sels["rack"], cross_sel=sels["cross"])
    expected: dict[int, list[tuple[str, int, int]]] = {}
    for source, selections in sels.items():
        for mi, sel in enumerate(selections):
            f = flows[net.block(f"{source}:{mi}")]
            keep = (f > 0) & ~done[sel]
            for i, n in zip(sel[keep].tolist(), f[keep].tolist(), strict=True):
                expected.setdefault(i, []).append((source, mi, n))
    got = _given(phase, flows, done)
    assert got == expected  # (each task's list in order)


def test_an_images_parts_are_what_phi_goal_and_bandwidth_say_of_its_jobs_without_slo_or_bandwidth() -> None:
    """`_image_parts` works its parts out from the profile alone: the same floats as `phi` of the job
    itself (a known profile) and `goal_s` and `remote_gbps` of a copy of it without an SLO and a bandwidth,
    for known and unknown images, the caller's profiles, and jobs with and without either."""
    from dataclasses import replace

    from disagg.placement.cost import goal_s, phi, profile_of, remote_gbps
    from disagg.placement.flow import _image_parts
    from disagg.profiles import NEUTRAL, Profile

    own = Profile("own", 12.5, 0.3, 1.7, 0.4, 2.5)
    jobs = [make_job("a"), make_job("b", slo_s=None), replace(make_job("c"), network_gbps=7.0),
            replace(make_job("d", slo_s=3.0), image="unknown/x"), replace(make_job("e", slo_s=None), image="nope"),
            replace(make_job("f", slo_s=float("nan")), profile=own), replace(make_job("g"), profile=NEUTRAL),
            replace(make_job("h", slo_s=1e9), profile=own, network_gbps=0.5)]
    for job in jobs:
        profile = profile_of(job)
        no_slo = replace(job, slo_s=None, network_gbps=None)
        want = (profile, phi(job, profile, 0.0, 0.0) if profile.known else None, goal_s(no_slo, profile),
                remote_gbps(no_slo, profile))
        assert repr(_image_parts(job)) == repr(want), job.name


def test_a_table_extended_by_no_jobs_is_itself_unless_a_job_is_now_forced() -> None:
    """`JobTable.extended` with no new jobs (second tries, the liveness rule's forced jobs): the same table
    (no number of it changed, and the cost model's unscheduled arcs kept for it stay right) while no job's
    `must_place` changed; else a table of the numbers `JobTable.of` reads, the rows in place."""
    import numpy as np

    from disagg.placement.jobstate import JobTable

    cache = _RoundJobCache()
    jobs = [FlowPlacer._job_state(make_job(f"j{i}", slo_s=100.0 + i), i, cache) for i in range(4)]
    bonus = {"": 0.25}
    table = JobTable.of(jobs[:3], bonus).extended(jobs, jobs[3:], bonus)
    assert table.extended(jobs, [], bonus) is table
    jobs[1].must_place = True
    forced = table.extended(jobs, [], bonus)
    fresh = JobTable.of(jobs, bonus)
    assert forced is not table and forced.must_place.tolist() == [False, True, False, False]
    for name in ("tau", "z", "gbps", "phi_local", "order", "waits", "guard", "must_place", "fair"):
        assert np.array_equal(getattr(forced, name), getattr(fresh, name)), name
    assert all(np.array_equal(a, b) for a, b in zip(forced.params, fresh.params, strict=True))
    assert [js.index for js in jobs] == [0, 1, 2, 3]


def test_a_tables_columns_are_read_off_its_jobs_as_a_pass_per_column_reads_them() -> None:
    """`JobTable.of` reads its float columns in one pass (`_numbers`), and `extended` appends them in one
    call: the same floats, to the bit, as reading each column off the jobs (`column`, `profile_arrays`), for
    known and unknown images, the caller's profiles, odd SLOs, W and importances; each column contiguous.
    A table made field by field is extended likewise."""
    from dataclasses import replace

    import numpy as np

    from disagg.placement.jobstate import JobTable, profile_arrays
    from disagg.placement.state import column
    from disagg.profiles import Profile

    own = Profile("own", 12.5, 0.3, 1.7, 0.4, 2.5)
    made = [make_job("a"), make_job("b", slo_s=None, wait_rounds=7), replace(make_job("c"), network_gbps=7.0),
            replace(make_job("d", slo_s=3.0), image="unknown/x"), make_job("e", slo_s=float("nan"), importance=20.0),
            replace(make_job("f", slo_s=1e-9), profile=own), replace(make_job("g", slo_s=None), image="nope")]
    cache = _RoundJobCache(wait_rounds=lambda job: len(job.name) * 3)
    jobs = FlowPlacer._job_states(made, [4, 0, 6, 1, 3, 2, 5], cache)
    for js, guard in zip(jobs, (0, 1, 2, 0, 1, 2, 0), strict=True):
        js.guard = guard
    jobs[2].must_place = True
    bonus = {"": 0.125}

    def same(a: np.ndarray, b: np.ndarray) -> bool:
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

    def check(table: JobTable) -> None:
        for name, dtype in (("tau", np.float64), ("z", np.float64), ("gbps", np.float64), ("phi_local", np.float64),
                            ("order", np.float64), ("guard", np.int64), ("must_place", np.bool_)):
            assert same(getattr(table, name), column(jobs, name, dtype)), name
            assert getattr(table, name).flags.c_contiguous, name
        assert same(table.waits, column(jobs, "wait_rounds"))
        for got, want in zip(table.params, profile_arrays(jobs), strict=True):
            assert same(got, want) and got.flags.c_contiguous
        assert table.fair is not None and same(table.fair, JobTable.of(jobs, bonus).fair)  # type: ignore[arg-type]

    check(JobTable.of(jobs, bonus))
    check(JobTable.of(jobs[:3], bonus).extended(jobs, jobs[3:], bonus))
    check(JobTable.of(jobs[:1], bonus).extended(jobs[:4], jobs[1:4], bonus).extended(jobs, jobs[4:], bonus))
    by_field = JobTable.of(jobs[:3], bonus)
    by_field = replace(by_field, **{name: getattr(by_field, name).copy() for name in ("tau", "z", "gbps", "phi_local",
                                                                                       "order", "waits")},
                       params=tuple(a.copy() for a in by_field.params), numbers=None)
    check(by_field.extended(jobs, jobs[3:], bonus))
    assert [js.index for js in jobs] == list(range(len(jobs)))
    empty = JobTable.of([], bonus)
    assert all(len(getattr(empty, name)) == 0 for name in ("tau", "waits", "guard", "must_place"))


def test_a_phase_answered_by_the_last_phase_that_fitted_nowhere_is_answered_as_a_fresh_look_would() -> None:
    """Where `_nowhere` answers a phase from what the phase before it found (`FlowRound.nowhere_said`: the
    state unchanged since, only re-admitted jobs of keys it failed), a fresh look (`_fits_nowhere`) at
    that moment fails the same keys for the same reasons: checked at each such phase of server-centric
    and network-aware runs, and those phases happen."""
    from disagg.placement.registry import get_policy
    from disagg.sim.engine import SimConfig, simulate
    from disagg.sim.scenarios import get_scenario

    scenario = get_scenario("paper-16m-512j")
    cluster = scenario.cluster()
    answered = 0
    for name in ("firmament", "drmaestro-na"):
        policy = get_policy(name)
        placer = policy._placer  # type: ignore[attr-defined]
        nowhere = placer._nowhere

        def checked(rnd, pending, known, nowhere=nowhere, placer=placer):  # type: ignore[no-untyped-def]
            nonlocal answered
            said = rnd.nowhere_said
            jobs = [rnd.ordered[i] for i in rnd.cold]
            keys = [(id(j.tasks), j.network_gbps, j.image) for j in jobs]
            if not pending and said is not None and all(k in said for k in keys):
                why, failed = placer._fits_nowhere(rnd, pending, rnd.cold, keys, {})
                assert failed and all(why[k] == said[k] for k in keys)
                answered += 1
            return nowhere(rnd, pending, known)

        placer._nowhere = checked
        simulate(cluster, scenario.submissions(1, cluster)[:300], policy, 1, SimConfig(interval_s=5.0))
    assert answered > 10
