"""Issue 14: a run that cannot finish says so. Trace files written in the documented formats run for
every policy: tasks that want a GPU and an NVMe drive on machines that hold one kind each, and 2-task
jobs whose remote GPUs are wider than one uplink."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from disagg.cli import app
from disagg.model import load_cluster
from disagg.placement.registry import POLICIES, get_policy
from disagg.sim.engine import SimConfig, simulate
from disagg.sim.metrics import summarize
from disagg.sim.report import RunOutput, stall_notes
from disagg.sim.trace import read_trace

#: Server-centric policies can never give a task a GPU and an NVMe drive when no machine holds both.
NEVER_PLACED = {"firmament": ["mix1", "mix2", "mix3"], "greedy": ["mix1", "mix2", "mix3"]}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_single_kind_machines_every_policy_finishes_or_names_what_it_can_never_place(policy: str,
                                                                                     data: Path) -> None:
    cluster = load_cluster(data / "single_kind_cluster.yaml")
    subs = read_trace(data / "single_kind_jobs.csv")
    result = simulate(cluster, subs, get_policy(policy), seed=1, config=SimConfig(stall_rounds=200))
    row = summarize(result, 1)
    stuck = NEVER_PLACED.get(policy, [])
    assert row["completed"] == len(subs) - len(stuck)
    assert row["stalled"] == bool(stuck)
    assert [x["job"] for x in row["stalled_jobs"]] == stuck
    for x in row["stalled_jobs"]:
        assert "gpu, 1 nvme on" in x["reason"]  # the reason names the devices it needs on one machine
    if stuck:
        (line,) = stall_notes([RunOutput("single_kind_jobs", {**row, "scenario": "single_kind_jobs"})])
        assert line.startswith(f"single_kind_jobs/{policy}/seed 1: done 5/8 — stalled: 3 jobs can never be "
                               f"placed by {policy}; first: mix1 (")


def invoke(*args: str) -> tuple[int, str]:
    out = CliRunner().invoke(app, ["simulate", *args])
    return out.exit_code, " ".join(out.output.split())


def test_simulate_exits_3_naming_the_stuck_jobs_unless_allowed(data: Path, tmp_path: Path) -> None:
    args = ["--cluster", str(data / "single_kind_cluster.yaml"), "--trace", str(data / "single_kind_jobs.csv"),
            "--policies", "drmaestro,greedy"]
    code, output = invoke(*args, "--json", str(tmp_path / "a.json"))
    assert code == 3
    assert "5/8 stalled" in output
    assert ("single_kind_jobs/greedy/seed 1: done 5/8 — stalled: 3 jobs can never be placed by greedy; "
            "first: mix1") in output
    assert "--allow-stall" in output
    doc = json.loads((tmp_path / "a.json").read_text())  # written before the verdict
    by_policy = {r["policy"]: r for r in doc["results"]}
    assert by_policy["drmaestro"]["stalled_jobs"] == []
    assert [x["job"] for x in by_policy["greedy"]["stalled_jobs"]] == ["mix1", "mix2", "mix3"]
    code, output = invoke(*args, "--allow-stall")
    assert code == 0, output
    assert "stalled: 3 jobs can never be placed by greedy" in output


def test_the_starvation_bound_reads_w_whatever_the_policy(data: Path) -> None:
    import numpy as np

    from disagg.sim.engine import Simulation

    cluster = load_cluster(data / "single_kind_cluster.yaml")
    plain = Simulation(cluster, [], get_policy("greedy"), np.random.default_rng(0))
    bounded = Simulation(cluster, [], get_policy("greedy"), np.random.default_rng(0), SimConfig(starvation_rounds=5))
    assert not plain.track_waits and bounded.track_waits
