"""`disagg bench sim paper`'s plumbing on the smallest scenario (the numbers themselves are not asserted)."""

from __future__ import annotations

from disagg.placement.registry import POLICIES
from disagg.sim.bench import KEYS, bench_paper, paper_row

WALL = {"wall_s", "cpu_s", "policy_s", "engine_s", "sim_s_per_wall_s", "rounds_per_wall_s",
        "sched_latency_p50_s", "sched_latency_p99_s"}


def test_paper_bench_in_parallel_gives_every_policy_in_registry_order_with_its_cpu_time() -> None:
    out = bench_paper(seed=2, workers=2, scenario="paper-4m-128j")
    assert out["scenario"] == "paper-4m-128j" and out["workers"] == 2
    rows = out["policies"]
    assert [r["policy"] for r in rows] == list(POLICIES)
    for r in rows:
        assert set(KEYS) <= set(r) and r["cpu_s"] > 0 and r["completed"] == r["jobs"] == 128
        assert r["sim_s_per_wall_s"] > 0 and r["rounds_per_wall_s"] > 0
    assert abs(out["total_cpu_s"] - sum(r["cpu_s"] for r in rows)) < 0.05
    assert set(out["load_avg_1m"]) == {"start", "end"}
    # The machine it ran on, measured beside the figures (machines differ between sessions).
    assert out["machine"]["python_ms"] > 0 and out["machine"]["numpy_call_us"] > 0 and out["machine"]["cores"] >= 1
    # A worker process decides what this process decides.
    here = paper_row("greedy", 2, 5.0, "paper-4m-128j")
    there = rows[list(POLICIES).index("greedy")]
    assert {k: v for k, v in here.items() if k not in WALL} == {k: v for k, v in there.items() if k not in WALL}


def test_paper_bench_hands_its_passes_to_the_flow_policies_alone() -> None:
    one = bench_paper(seed=2, workers=1, scenario="paper-4m-128j", max_iterations=1)
    own = bench_paper(seed=2, workers=1, scenario="paper-4m-128j")
    assert one["max_iterations"] == 1 and own["max_iterations"] is None
    flow = {"drmaestro", "drmaestro-na", "firmament"}
    for a, b in zip(one["policies"], own["policies"], strict=True):
        if a["policy"] not in flow:  # (the others make no passes: the same run)
            assert {k: v for k, v in a.items() if k not in WALL} == {k: v for k, v in b.items() if k not in WALL}
    # A flow policy's row is its run with one pass a round (what `paper_row` makes of the same policy),
    # not its own (on this scenario and seed, drmaestro-na's later passes move its makespan).
    there = next(r for r in one["policies"] if r["policy"] == "drmaestro-na")
    here = paper_row("drmaestro-na", 2, 5.0, "paper-4m-128j", max_iterations=1)
    assert {k: v for k, v in here.items() if k not in WALL} == {k: v for k, v in there.items() if k not in WALL}
    assert there["makespan_s"] != next(r for r in own["policies"] if r["policy"] == "drmaestro-na")["makespan_s"]
