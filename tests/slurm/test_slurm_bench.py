"""`disagg bench slices --engine slurm`'s controller half, run as a user runs it by hand: without the
suite's allowance for jobs on the store's disk (tests/conftest.py sets it for every controller of the
suite, which hid that this benchmark's throw-away controller was refused as root with its store in /tmp)."""

from __future__ import annotations

import pytest

from disagg.bench.slurm import CONTROLLER_STEPS, controller_bench
from disagg.engines.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm


@pytest.mark.usefixtures("run_by_hand")
@pytest.mark.parametrize("engine_name", ["local", "slurm"])
def test_the_controller_bench_runs_without_the_suites_allowance(slurm_cluster: SlurmCluster, engine_name: str) -> None:
    trials: list[int] = []
    out = controller_bench(slurm_cluster.site, engine_name, 1, ["1x4"], lambda: trials.append(1))
    assert trials == [1]
    row = out["1x4"]
    assert set(row["steps_s"]) == set(CONTROLLER_STEPS)
    assert row["total_s"] > 0 and row["total_s"] >= row["steps_s"]["placed"]
    assert row["samples_total_s"] == [pytest.approx(row["total_s"], abs=1e-3)]
