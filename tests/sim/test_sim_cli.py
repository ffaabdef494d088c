"""`disagg simulate` end to end: bad input exits 2 before simulating; tables, JSON and plots; sweeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from disagg.cli import app

RESULT_KEYS = {"policy", "seed", "jobs", "completed", "makespan_s", "qos_violations", "mean_jct_s",
               "gpu_utilization", "remote_gpu_share", "sched_latency_p50_s", "sched_latency_p99_s", "wall_s"}


def invoke(*args: str) -> tuple[int, str]:
    out = CliRunner().invoke(app, ["simulate", *args])
    return out.exit_code, out.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "paper-9m-1j"], "known scenarios: paper-4m-128j, paper-4m-512j, paper-16m-512j"),
        (["--scenario", "paper-4m-128j", "--policies", "drmaestro,magic"], "known policies: drmaestro"),
        (["--scenario", "paper-4m-128j", "--seeds", "1,x"], "'x' is not an integer"),
        (["--scenario", "paper-4m-128j", "--interval", "0"], "must be a finite number > 0"),
        ([], "give --scenario NAME"),
        (["--scenario", "paper-4m-128j,paper-4m-512j"], "need --sweep"),
        (["--scenario", "paper-4m-128j", "--mtbf", "-5"], "both must be finite numbers > 0"),
    ],
    ids=["scenario", "policy", "seed", "interval", "nothing", "two-scenarios", "mtbf"],
)
def test_bad_input_exits_2_and_says_what_is_allowed(args: list[str], message: str, tmp_path: Path) -> None:
    code, output = invoke(*args, "--json", str(tmp_path / "out.json"))
    assert code == 2
    assert message in " ".join(output.split())
    assert not (tmp_path / "out.json").exists()


def test_a_malformed_trace_row_stops_the_run_before_simulating(data: Path, tmp_path: Path) -> None:
    code, output = invoke("--cluster", str(data / "cluster.yaml"), "--trace", str(data / "bad.csv"),
                          "--json", str(tmp_path / "out.json"))
    assert code == 2
    flat = " ".join(output.split())
    assert "bad.csv" in flat and "line 3, column 'cpus': value 'two'" in flat
    assert not (tmp_path / "out.json").exists()


def test_a_trace_job_that_can_never_fit_is_refused(tmp_path: Path, data: Path) -> None:
    trace = tmp_path / "big.csv"
    trace.write_text("job_id,submit_s,image,tasks,cpus,gpu\nhuge,0,rodinia/nw,1,64,1\n")
    code, output = invoke("--cluster", str(data / "cluster.yaml"), "--trace", str(trace))
    assert code == 2
    assert "job 'huge' can never fit" in " ".join(output.split())


@pytest.mark.parametrize("trace", ["jobs.csv", "pai_task_table.csv", "philly_cluster_job_log.json"])
def test_trace_runs_end_to_end_with_json(trace: str, data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    code, output = invoke("--cluster", str(data / "cluster.yaml"), "--trace", str(data / trace),
                          "--policies", "drmaestro,firmament", "--seeds", "1,2", "--json", str(out))
    assert code == 0, output
    doc = json.loads(out.read_text())
    assert len(doc["results"]) == 4
    for row in doc["results"]:
        assert set(row) >= RESULT_KEYS
        assert row["completed"] == row["jobs"] > 0


def test_scenario_table_json_and_plots(tmp_path: Path) -> None:
    out, plots = tmp_path / "r.json", tmp_path / "plots"
    code, output = invoke("--scenario", "paper-4m-128j", "--policies", "drmaestro,firmament",
                          "--json", str(out), "--plots", str(plots))
    assert code == 0, output
    assert "paper-4m-128j" in output and "drmaestro" in output and "firmament" in output
    doc = json.loads(out.read_text())
    assert doc["scenario"] == "paper-4m-128j"
    assert [r["policy"] for r in doc["results"]] == ["drmaestro", "firmament"]
    assert all(set(r) >= RESULT_KEYS and r["jobs"] == 128 for r in doc["results"])
    pngs = sorted(p.name for p in plots.iterdir())
    assert pngs == ["paper-4m-128j-gpus-in-use.png", "paper-4m-128j-normalized-exec.png",
                    "paper-4m-128j-sched-latency-cdf.png"]
    for p in plots.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_sweep_on_local_workers_matches_the_serial_run(tmp_path: Path) -> None:
    serial, parallel = tmp_path / "s.json", tmp_path / "p.json"
    args = ["--scenario", "paper-4m-128j", "--policies", "fifo,drmaestro", "--seeds", "1,2"]
    assert invoke(*args, "--json", str(serial))[0] == 0
    code, output = invoke(*args, "--sweep", "--workers", "2", "--json", str(parallel))
    assert code == 0, output
    wall = {"wall_s", "sched_latency_p50_s", "sched_latency_p99_s", "sim_s_per_wall_s", "rounds_per_wall_s"}

    def strip(path: Path) -> list[dict[str, object]]:
        return [{k: v for k, v in r.items() if k not in wall} for r in json.loads(path.read_text())["results"]]

    assert strip(serial) == strip(parallel)


def test_device_failures_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "f.json"
    code, output = invoke("--scenario", "paper-4m-128j", "--policies", "drmaestro", "--mtbf", "3000",
                          "--mttr", "60", "--json", str(out))
    assert code == 0, output
    row = json.loads(out.read_text())["results"][0]
    assert row["restarts"] > 0 and row["completed"] == 128
