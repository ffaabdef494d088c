"""`disagg bench api` and `bench slices` run end to end (short runs; their speeds are printed, never asserted),
as a user runs them: without the suite's allowance of jobs on the store's disk (tests/conftest.py gives it
to every controller; it hid that both refused to start as root with their stores in /tmp)."""

from __future__ import annotations

import pytest

from disagg.bench.api import run_api_bench
from disagg.bench.slices import SHAPES, run_slices_bench

pytestmark = pytest.mark.usefixtures("run_by_hand")


@pytest.mark.slow
def test_bench_api_submits_while_the_loop_process_places() -> None:
    r = run_api_bench("sqlite", seconds=1.5, clients=2, scale=0.001, tick_s=0.05)
    assert r["errors"] == 0 and r["submitted"] > 0 and r["api_process"]
    assert sum(r["jobs_by_state"].values()) == r["submitted"]  # every 201 is a stored job
    assert r["placed_by_end"] > 0  # the loop process placed some of them meanwhile
    assert r["cpu_s"]["loop"] > 0 and r["cpu_s"]["api"] > 0
    assert set(r["latency_ms"]) == {"p50", "p90", "p99", "max", "mean"}


def test_bench_slices_composes_every_shape_both_ways() -> None:
    r = run_slices_bench(scale=0.002, repeats=1)
    assert [row["shape"] for row in r["shapes"]] == [f"{m}x{g}" for m, g in SHAPES]
    for row in r["shapes"]:
        for mode in ("serial", "parallel"):
            # every phase ran (compose takes at least its slowest step) and was timed
            assert row[mode]["compose_s"] >= row[mode]["slowest_step_s"] > 0 and row[mode]["teardown_s"] > 0
    assert isinstance(r["target_met"], bool)


def test_bench_slices_composes_through_redfish() -> None:
    r = run_slices_bench(scale=0.002, repeats=1, fabric="redfish")
    assert r["fabric"] == "redfish" and [row["shape"] for row in r["shapes"]] == [f"{m}x{g}" for m, g in SHAPES]
    assert all(row["parallel"]["compose_s"] > 0 for row in r["shapes"])
