"""`disagg place` and `disagg bench placement` as a user runs them (subprocess, real exit codes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DISAGG = [sys.executable, "-m", "disagg.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DISAGG, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("policy", ["drmaestro", "drmaestro-na", "firmament", "greedy", "random-remote", "fifo"])
def test_place_json_has_the_documented_shape(policy: str) -> None:
    out = run("place", "--cluster", "examples/drmaestro-testbed.yaml", "--jobs", "examples/drmaestro-jobs.yaml",
              "--policy", policy, "--json", "--now", "10", "--seed", "3")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["policy"] == policy
    assert set(data["timings"]) >= {"build_s", "solve_s", "decode_s", "round_s"}
    names = [p["job"] for p in data["placed"]] + [u["job"] for u in data["unplaced"]]
    assert sorted(names) == sorted(["nw-1", "hotspot-1", "srad-1", "bptree-1", "lavamd-1", "pathfinder-1", "big-1"])
    for p in data["placed"]:
        for t in p["tasks"]:
            assert set(t) >= {"task", "machine", "cpus", "memory_gb", "devices"}
            for d in t["devices"]:
                assert set(d) >= {"id", "kind", "remote"}
    for u in data["unplaced"]:
        assert u["reason"]
    # one job per line: each line of the lists is a whole JSON object of its own
    rows = [line.strip().rstrip(",") for line in out.stdout.splitlines() if line.startswith('    {"job"')]
    assert [json.loads(r) for r in rows] == data["placed"] + data["unplaced"]


def test_place_table_output_names_jobs_and_reasons() -> None:
    out = run("place", "--cluster", "examples/drmaestro-testbed.yaml", "--jobs", "examples/drmaestro-jobs.yaml",
              "--policy", "firmament")
    assert out.returncode == 0, out.stderr
    assert "placed" in out.stdout and "waiting" in out.stdout and "srad-1" in out.stdout


def test_bad_spec_exits_2_names_the_field_and_places_nothing(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - {name: j1, tasks: {count: -1, gpu: 2}}\n")
    out = run("place", "--cluster", "examples/drmaestro-testbed.yaml", "--jobs", str(jobs), "--json")
    assert out.returncode == 2
    assert out.stdout == ""
    assert "jobs.yaml" in out.stderr and "jobs[0].tasks.count" in out.stderr and "-1" in out.stderr


def test_job_that_never_fits_is_an_error(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"jobs": [{"name": "huge", "tasks": {"gpu": 17}}]}))
    out = run("place", "--cluster", "examples/drmaestro-testbed.yaml", "--jobs", str(jobs))
    assert out.returncode == 2
    assert "can never fit" in out.stderr and "needs 17 gpu" in out.stderr


def test_unknown_policy_lists_the_known_ones() -> None:
    out = run("place", "--cluster", "examples/drmaestro-testbed.yaml", "--jobs", "examples/drmaestro-jobs.yaml",
              "--policy", "best")
    assert out.returncode == 2
    assert "unknown policy 'best'" in out.stderr and "drmaestro-na" in out.stderr


def test_bench_sim_passes_are_bounded_and_asked_of_the_paper_bench_only() -> None:
    out = run("bench", "sim", "paper", "--max-iterations", "0")
    assert out.returncode == 2 and "--max-iterations" in out.stderr and out.stdout == ""
    out = run("bench", "sim", "large", "--jobs", "10", "--machines", "2", "--max-iterations", "2")
    assert out.returncode != 0 and "only the paper benchmark takes it" in out.stderr and out.stdout == ""


def test_bench_placement_prints_numbers() -> None:
    out = run("bench", "placement", "--machines", "80", "--gpus-per-machine", "4", "--pending", "60",
              "--policy", "drmaestro", "--seed", "2", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) >= {"machines", "pending", "placed", "build_s", "solve_s", "decode_s", "round_s", "peak_rss_mb"}
    assert data["machines"] == 80 and data["pending"] == 60 and 0 < data["placed"] <= 60
    assert data["round_s"] >= data["solve_s"] > 0
    # Python's share is everything in the round but the solver (not only what is timed as build/decode).
    python = data["round_s"] - data["solve_s"]
    assert python >= data["build_s"] + data["decode_s"] - 2e-4
    assert abs(data["python_over_solver_wall"] - python / data["solve_s"]) < 0.02 + 1e-3 / data["solve_s"]
    # The CPU ratio divides the fastest round by the CPU clock, which the JSON names.
    best, bare = data["round_cpu_best_s"], data["bare_solve_s"]  # (each rounded to 4 places in the JSON)
    assert best > 0 and data["round_cpu_over_bare"] == pytest.approx(best / bare, rel=1e-4 / best + 1e-4 / bare,
                                                                       abs=0.006)
    # no solver, no ratio (not a number divided by a tiny epsilon)
    for policy, pending in (("greedy", "60"), ("drmaestro", "0")):
        out = run("bench", "placement", "--machines", "80", "--gpus-per-machine", "4", "--pending", pending,
                  "--policy", policy, "--json")
        none = json.loads(out.stdout)
        assert none["solve_s"] == 0 and none["python_over_solver"] is None is none["python_over_solver_wall"], policy


def test_dump_graphs_writes_each_solved_phase(tmp_path: Path) -> None:
    out = run("place", "--cluster", "examples/drmaestro-testbed.yaml", "--jobs", "examples/drmaestro-jobs.yaml",
              "--policy", "drmaestro", "--dump-graphs", str(tmp_path / "g"), "--json")
    assert out.returncode == 0, out.stderr
    files = sorted(p.name for p in (tmp_path / "g").iterdir())
    assert files[:4] == ["00-phase1.dot", "00-phase1.json", "01-gpu.dot", "01-gpu.json"]
    graph = json.loads((tmp_path / "g" / "01-gpu.json").read_text())
    supply = sum(n["supply"] for n in graph["nodes"] if n["supply"] > 0)
    into_sink = sum(a["flow"] for a in graph["arcs"] if a["block"].startswith(("loc->sink", "U->sink")))
    assert supply == into_sink > 0, "every unit of supply reaches the sink"
    refused = run("place", "--cluster", "examples/drmaestro-testbed.yaml", "--jobs", "examples/drmaestro-jobs.yaml",
                  "--policy", "greedy", "--dump-graphs", str(tmp_path / "h"))
    assert refused.returncode == 2 and "builds no flow network" in refused.stderr


def test_the_command_starts_without_the_store() -> None:
    """Every `disagg` command imports the CLI, which registers every sub-command; SQLAlchemy and the
    store (≈ 0.4 s) load only in the commands that use them (`disagg --help` went 1.5 s → 0.7 s)."""
    code = "import sys, disagg.cli; print(sorted(m for m in ('sqlalchemy', 'disagg.store') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


# --- numbers that are not finite, paths that are not URLs: a clear refusal, exit 2, never a traceback ----------


def _refused(out: subprocess.CompletedProcess[str], words: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr[-600:])
    assert words in out.stderr and "Traceback" not in out.stderr, out.stderr[-600:]


@pytest.mark.parametrize(("args", "words"), [
    (["--cpus", "nan"], "tasks.cpus: value nan is not allowed: must be a finite number"),
    (["--memory-gb", "inf"], "tasks.memory_gb: value inf is not allowed"),
    (["--slo-s", "inf"], "slo_s: value inf is not allowed"),
    (["--importance", "nan"], "importance: value nan is not allowed"),
], ids=["cpus-nan", "memory-inf", "slo-inf", "importance-nan"])
def test_submit_refuses_a_number_json_cannot_carry_before_it_calls(args: list[str], words: str) -> None:
    """The encoder's `ValueError: Out of range float values are not JSON compliant` was a traceback, exit 1.
    (No controller listens at port 9: the refusal comes before any call.)"""
    out = run("submit", "x", *args, "--url", "http://127.0.0.1:9", "--token", "t", "--", "true")
    _refused(out, words)


def test_a_job_id_with_a_control_character_is_refused_not_a_traceback() -> None:
    out = run("cancel", "j-\x01", "--url", "http://127.0.0.1:9", "--token", "t")
    _refused(out, "job: 'j-\\x01' is not allowed: it has control characters")


def test_not_finite_names_the_first_field_json_cannot_carry() -> None:
    from disagg.cli.common import not_finite

    assert not_finite({"name": "x", "tasks": {"cpus": 1.0, "memory_gb": 2}, "command": ["a"]}) is None
    assert not_finite(None) is None
    field, value = not_finite({"tasks": {"cpus": float("nan")}}) or ("", 0.0)
    assert field == "tasks.cpus" and value != value  # NaN
    assert not_finite({"jobs": [{"slo_s": 5.0}, {"slo_s": float("-inf")}]}) == ("jobs.1.slo_s", float("-inf"))


@pytest.mark.parametrize(("args", "words"), [
    (["--interval", "nan"], "--interval: value nan is not allowed: must be a finite number > 0 seconds"),
    (["--interval", "inf"], "--interval: value inf is not allowed"),
    (["--mtbf", "nan"], "--mtbf/--mttr: values nan/600 are not allowed"),
    (["--mtbf", "100", "--mttr", "inf"], "--mtbf/--mttr: values 100/inf are not allowed"),
], ids=["interval-nan", "interval-inf", "mtbf-nan", "mttr-inf"])
def test_simulate_refuses_times_that_are_not_finite(args: list[str], words: str) -> None:
    """`--interval nan` was a traceback, `--interval inf` a run that ended after its first round, `--mtbf nan`
    and `--mttr nan` runs that never ended."""
    _refused(run("simulate", "--scenario", "paper-4m-128j", "--policies", "greedy", *args), words)


def test_place_refuses_a_now_that_is_not_finite() -> None:
    out = run("place", "--cluster", "examples/drmaestro-testbed.yaml", "--jobs", "examples/drmaestro-jobs.yaml",
              "--now", "nan")
    _refused(out, "--now: value nan is not allowed: must be a finite number of seconds")


def test_the_simulators_own_settings_refuse_times_that_are_not_finite() -> None:
    from disagg.sim.engine import FailureModel, SimConfig

    for bad in (float("nan"), float("inf"), 0.0):
        with pytest.raises(ValueError, match=r"interval_s: value .* must be a finite number > 0 seconds"):
            SimConfig(interval_s=bad)
        with pytest.raises(ValueError, match="mttr_s"):
            FailureModel(100.0, bad)
    assert SimConfig(interval_s=2.5).interval_s == 2.5


def test_a_url_or_a_store_url_that_is_none_is_bad_input() -> None:
    """`--url notaurl` and `token create --db bogus://x` exited 1, as for a controller that does not answer."""
    out = run("jobs", "--url", "notaurl", "--token", "t")
    _refused(out, "--url: 'notaurl' is not allowed")
    out = run("token", "create", "--tenant", "x", "--db", "bogus://x")
    _refused(out, "--db: 'bogus://x' is not allowed (must be sqlite:///path/to/file.db or postgresql://")
    out = run("token", "create", "--tenant", "x", "--db", "sqlite:////tmp")
    _refused(out, "--db: /tmp is a directory, not a store")


def test_a_quota_that_names_a_resource_twice_is_refused() -> None:
    """`--quota gpu=1,gpu=2` kept the last value without a word."""
    out = run("tenants", "set", "t", "--quota", "gpu=1,gpu=2", "--url", "http://127.0.0.1:9", "--token", "t")
    _refused(out, "--quota: gpu is given twice (1 and 2): give it once")
