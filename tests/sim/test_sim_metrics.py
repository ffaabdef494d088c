"""Metrics on hand-made results: each number follows its definition in docs/simulator.md."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from disagg.sim.engine import JobRecord, SimResult
from disagg.sim.metrics import gpu_busy_seconds, normalized_exec, summarize
from disagg.sim.report import run_output, to_json


def result() -> SimResult:
    records = [
        JobRecord("warm", "warmup", 0.0, 2000.0, None, True, 0.0, 2000.0),
        JobRecord("a", "rodinia/nw", 10.0, 100.0, 120.0, False, 10.0, 110.0, gpus=1, remote_gpus=0),
        JobRecord("b", "rodinia/nw", 20.0, 100.0, 120.0, False, 30.0, 160.0, gpus=1, remote_gpus=1),
        JobRecord("c", "rodinia/nw", 30.0, 100.0, 120.0, False),  # never started
    ]
    return SimResult(
        policy="p", records=records, latencies_s=array("d", [0.001, 0.002, 0.003, 0.1]),
        gpu_times=array("d", [0.0, 10.0, 30.0, 110.0, 160.0]), gpu_in_use=array("d", [0, 1, 2, 1, 0]),
        total_gpus=4, rounds=4, conflicts=0, sim_end_s=160.0, wall_s=2.0, stalled=False, events=10,
    )


def test_gpu_busy_seconds_integrates_the_step_function() -> None:
    times = np.array([0.0, 10.0, 30.0, 110.0, 160.0])
    use = np.array([0.0, 1.0, 2.0, 1.0, 0.0])
    assert gpu_busy_seconds(times, use, 0.0, 160.0) == pytest.approx(20 + 160 + 50)
    assert gpu_busy_seconds(times, use, 20.0, 40.0) == pytest.approx(10 + 20)
    assert gpu_busy_seconds(times, use, 50.0, 50.0) == 0.0


def test_summary_follows_the_definitions() -> None:
    s = summarize(result(), seed=9)
    assert (s["seed"], s["jobs"], s["completed"]) == (9, 3, 2)  # warm-up excluded, "c" unfinished
    assert s["makespan_s"] == pytest.approx(160.0 - 10.0)
    assert s["qos_violations"] == 1  # b ran 130 s > 120 s
    assert s["mean_jct_s"] == pytest.approx((100.0 + 140.0) / 2)
    assert s["remote_gpu_share"] == 0.5
    assert s["gpu_utilization"] == pytest.approx((100 + 50 + 80) / (4 * 150.0), abs=1e-3)
    assert s["sched_latency_p50_s"] == pytest.approx(0.0025)
    assert s["rounds_per_wall_s"] == 2.0
    assert list(normalized_exec(result().records)) == [1.0, 1.3]


def test_json_has_the_documented_shape() -> None:
    doc = to_json([run_output("paper-4m-128j", result(), 1)])
    assert doc["scenario"] == "paper-4m-128j"
    row = doc["results"][0]
    for key in ("policy", "seed", "jobs", "completed", "makespan_s", "qos_violations", "mean_jct_s",
                "gpu_utilization", "remote_gpu_share", "sched_latency_p50_s", "sched_latency_p99_s", "wall_s"):
        assert key in row
