"""The flow round's structure: which class prices a shape's machines (the 1b066c6 regression)."""

from __future__ import annotations

from disagg.placement.flow import FlowPlacer, _JobStateCache
from disagg.placement.phase_one import classify, shape_representative
from disagg.profiles import RODINIA
from tests.builders import make_job


def _classes(slos: list[float]):  # type: ignore[no-untyped-def]
    cache = _JobStateCache()
    jobs = [FlowPlacer._job_state(make_job(f"j{i}", gpu=4, slo_s=s), i, cache) for i, s in enumerate(slos)]
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
    """... unless no placement meets its goal (a tenant's τ of a millisecond): then the next class that
    is met does; when none is, the loosest."""
    base = RODINIA["nw"].base_s
    cls = _classes([0.001, base * 1.5, base * 2.0])
    assert shape_representative(cls, cls.shapes[0]) == 1
    cls = _classes([0.001, 0.01, 0.002])
    assert shape_representative(cls, cls.shapes[0]) == 1


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
    assert run_placement_bench(80, 4, 0, "drmaestro", 1)["placed"] == 0
