"""The simulator keeps truth apart from knowledge (issue 26): jobs run by `--truth`, the policies see
what they learn, a given table, the truth (oracle) or nothing (neutral)."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from disagg.cli import app
from disagg.model import load_cluster
from disagg.model.spec import load_profiles
from disagg.profiles import Profile, expected_s
from disagg.profiles.learn import Observation, fit
from disagg.sim.learning import Knowledge, knowledge_for, load_blind, slope_unsure
from disagg.sim.sweep import RunSpec, run_one
from disagg.sim.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]
LEARNING = ROOT / "examples" / "learning"


def _trace(path: Path, jobs: int, seed: int) -> Path:
    """A trace of the example's four images (none of them in the shipped table), as the example's own."""
    truth = {p["image"]: p for p in yaml.safe_load((LEARNING / "truth.yaml").read_text())["profiles"]}
    rng = random.Random(seed)
    t = 0.0
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["job_id", "submit_s", "image", "tasks", "cpus", "memory_gb", "gpu", "nvme", "duration_s",
                      "slo_s", "importance"])
        for i in range(jobs):
            t += rng.expovariate(1 / 6.0)
            image = rng.choice(sorted(truth))
            base = truth[image]["base_s"] * rng.uniform(0.9, 1.1)
            out.writerow([f"j{i:04d}", round(t, 3), image, 1, 2, 8, rng.choice([1, 1, 2]), 0, round(base, 3),
                          round(base * 1.3, 3), 1])
    return path


def _run(trace: Path, knowledge: str) -> dict[str, object]:
    from disagg.sim.sweep import TraceSource

    source = TraceSource("learning", load_cluster(LEARNING / "cluster.yaml"), tuple(read_trace(trace)))
    spec = RunSpec("learning", "drmaestro-na", 1, 5.0, source, truth=load_profiles(LEARNING / "truth.yaml"),
                   knowledge=knowledge)
    return run_one(spec).summary


#: Traces the learning is judged on: how many of an image's first 20 jobs run remote, and at which
#: loads, is up to the trace, so one trace can be unlucky for an image (docs/profiles.md).
SEEDS = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("learning")
    return {seed: _trace(root / f"trace-{seed}.csv", 240, seed) for seed in SEEDS}


@pytest.fixture(scope="module")
def runs(traces: dict[int, Path]) -> dict[str, dict[str, object]]:
    return {k: _run(traces[SEEDS[0]], k) for k in ("oracle", "learned", "neutral")}


@pytest.fixture(scope="module")
def learned(traces: dict[int, Path], runs: dict[str, dict[str, object]]) -> dict[int, dict[str, Any]]:
    """Per trace, the learning report of `drmaestro-na` with learned profiles."""
    out: dict[int, Any] = {SEEDS[0]: runs["learned"]["learning"]}
    out.update({seed: _run(traces[seed], "learned")["learning"] for seed in SEEDS[1:]})
    return out


def test_learned_profiles_come_close_to_the_truth_and_their_bound_covers_it(
        learned: dict[int, dict[str, Any]]) -> None:
    after_20: dict[tuple[int, str], dict[str, float]] = {}
    for seed, learning in learned.items():
        assert isinstance(learning, dict)
        images = learning["images"]
        assert sorted(images) == ["etl", "infer", "solver", "trainer"]
        after_20.update({(seed, im): v["after_20"] for im, v in images.items()})
        final = {im: v["final"] for im, v in images.items()}
        for p in final.values():
            assert p["pessimistic"] >= p["slowdown"] - 1e-9
        # an image the policy keeps placing remote ends close (one it keeps local learns less). Each
        # job's own size varies (±10% around its image's base time, its SLO 1.3x its own): with the runs
        # brought to one size by their SLOs (`learn.sized_runs`) these end within 2%; read as they are,
        # the bigger jobs that met the higher loads made solver 15-16% over on trace 4 (docs/profiles.md,
        # "Third pass" and "Fifth pass")
        settled = {im: p for im, p in final.items() if p["remote"] >= 10}
        assert len(settled) >= 2 and all(p["error"] <= 0.05 for p in settled.values()), (seed, final)
    assert all(p is not None for p in after_20.values()), after_20
    # after 20 jobs: every (trace, image) within 5%, half the bar (here at most 2.4% with the
    # default `explore` of 6; all 180 pairs of docs/profiles.md's 45 longer traces within 3.9%; 9.98% on
    # trace 4's etl while runs reported their busiest remote device's load, "Sixth pass"), and the
    # bound the policy places by never far under the truth
    assert all(p["error"] <= 0.05 for p in after_20.values()), after_20
    assert all(p["pessimistic"] >= 0.95 * p["truth"] for p in after_20.values()), after_20


def test_learning_keeps_the_network_aware_policy_far_below_neutral(runs: dict[str, dict[str, object]]) -> None:
    # 240 jobs: most of the learned run's violations are its first jobs' (the 600-job runs of
    # docs/profiles.md come within 15% of the oracle over three seeds)
    v = {k: int(r["qos_violations"]) for k, r in runs.items()}  # type: ignore[call-overload]
    assert v["neutral"] > 3 * max(v["oracle"], 1), v
    assert 3 * v["learned"] < v["neutral"], v
    assert runs["learned"]["policy"] == "drmaestro-na (learned)"
    assert "learning" not in runs["oracle"]


def test_the_cli_runs_knowledge_side_by_side_and_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.csv", 30, 3)
    common = ["simulate", "--cluster", str(LEARNING / "cluster.yaml"), "--trace", str(trace), "--policies",
              "drmaestro"]
    out = CliRunner().invoke(app, [*common, "--knowledge", "oracle"])
    assert out.exit_code == 2 and "no --truth FILE" in out.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("profiles:\n  - {image: x, base_s: 1, transfer_share: 2, remote_factor: 1, load_sensitivity: 0,"
                   " network_gbps: 1}\n")
    out = CliRunner().invoke(app, [*common, "--truth", str(bad)])
    assert out.exit_code == 2 and "profiles[0] (image 'x').transfer_share" in out.output
    result = tmp_path / "r.json"
    out = CliRunner().invoke(app, [*common, "--truth", str(LEARNING / "truth.yaml"), "--knowledge",
                                   "oracle,learned", "--json", str(result), "--plots", str(tmp_path / "plots")])
    assert out.exit_code == 0, out.output
    rows = json.loads(result.read_text())["results"]
    assert [r["knowledge"] for r in rows] == ["oracle", "learned"]
    assert (tmp_path / "plots" / "t-learning.png").exists()


ETL = Profile("etl", 120.0, 0.6, 2.0, 4.0, 6.0)


def _remote_runs(truth: Profile, loads: list[float], seed: int = 0) -> list[Observation]:
    rng = np.random.default_rng(seed)
    local = [Observation(expected_s(truth, 0.0, 0.0) * rng.normal(1.0, 0.02), 0.0, 0.0) for _ in range(6)]
    return local + [Observation(expected_s(truth, 1.0, x) * rng.normal(1.0, 0.02), 1.0, x) for x in loads]


def test_remote_runs_at_one_narrow_band_of_loads_leave_the_slope_unsure_and_spread_ones_pin_it() -> None:
    """Trace 7's etl (docs/profiles.md): remote runs at loads 0.15-0.18 pin φ there, not C."""
    narrow = fit("etl", _remote_runs(ETL, [0.15, 0.16]))
    spread = fit("etl", _remote_runs(ETL, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]))
    assert slope_unsure(narrow) and not slope_unsure(spread)


@settings(max_examples=40, deadline=None)
@given(loads=st.lists(st.floats(0.0, 0.9), min_size=0, max_size=6), seed=st.integers(0, 2 ** 16),
       load=st.floats(0.0, 1.0))
def test_a_load_blind_profile_costs_what_was_seen_whatever_the_load(loads: list[float], seed: int,
                                                                     load: float) -> None:
    """φ of the blind profile is the estimate's at the mean load its remote runs met (idle with none),
    at every load: the policy then has no reason to prefer a quiet path for it, and the SLO still holds
    it back where what was seen already misses."""
    runs = _remote_runs(ETL, loads, seed)
    est = fit("etl", runs)
    blind = load_blind(est, runs)
    seen = float(np.mean(loads)) if loads else 0.0
    a, b, c = est.coef
    assert blind.load_sensitivity == 0.0
    assert expected_s(blind, 1.0, load) == pytest.approx(expected_s(blind, 1.0, 0.0), rel=1e-9)
    assert expected_s(blind, 1.0, load) == pytest.approx(max(a, 1e-3) + max(b + c * seen, 0.0), rel=1e-6)
    assert expected_s(blind, 0.0, load) == pytest.approx(a, rel=1e-6)


def test_knowledge_places_an_unsure_image_blind_to_load_for_its_first_remote_runs_only() -> None:
    k = knowledge_for("learned", None, None, blind=4)
    assert isinstance(k, Knowledge) and k.blind == 4
    runs = _remote_runs(ETL, [0.15, 0.16, 0.16, 0.17, 0.18])
    seen = []
    for obs in runs:
        k.observe("acme/etl", obs)
        seen.append((k.estimates["etl"].remote_observations, k.learned["etl"].load_sensitivity))
    # blind (σ = 0) while fewer than 4 remote runs; after, the estimate with its slope (σ > 0)
    assert all(sigma == 0.0 for remote, sigma in seen if remote < 4)
    assert all(sigma > 0.0 for remote, sigma in seen if remote >= 4)
    assert knowledge_for("learned", None, None, blind=0).blind == 0


def test_an_image_s_remote_runs_in_flight_end_its_exploring() -> None:
    """Placed by its estimate while its finished and running remote runs are under `explore`, by its
    pessimistic bound from then on: a long image's first remote runs would otherwise all be placed on
    the neutral prior's "remote is free" before the first of them ends."""
    from disagg.model import Job, TaskRequest
    from disagg.profiles import normalize_image
    from disagg.profiles.learn import Observation
    from disagg.sim.learning import knowledge_for

    k = knowledge_for("learned", None, None, explore=3)
    for i in range(4):
        k.observe("acme/long", Observation(100.0 + i, 0.0, 0.0))
    k.observe("acme/long", Observation(150.0, 1.0, 0.2))
    job = Job("j", "acme/long", TaskRequest(devices={"gpu": 1}))
    est = k.estimates[normalize_image("acme/long")]
    key = normalize_image("acme/long")
    seen = {n: k.apply([job], {key: n})[0].profile for n in (0, 1, 2)}
    assert seen[0] == seen[1] == est.profile()  # 1 + 0 and 1 + 1 remote runs: exploring
    assert seen[2] == est.profile(pessimistic=True)  # 1 + 2: cautious
    assert k.apply([job], {"other": 5})[0].profile == est.profile()


def test_an_image_with_no_finished_run_is_placed_by_its_priors_bound_once_enough_run_remote() -> None:
    """Before its first run ends an image has no estimate: neutral ("remote is free") while its remote
    runs in flight are under `explore`, then its prior's bound relative to each job's SLO
    (`learn.cold_bound`): the typical terms of the images learned so far, else the neutral prior's."""
    from disagg.model import Job, TaskRequest
    from disagg.profiles import NEUTRAL
    from disagg.profiles.learn import Observation, cold_bound, remote_slowdown, typical_of
    from disagg.sim.learning import knowledge_for

    k = knowledge_for("learned", None, None, explore=2)
    job = Job("j", "acme/new", TaskRequest(devices={"gpu": 1}), slo_s=100.0)
    assert k.apply([job], {"new": 1})[0].profile == NEUTRAL
    cold = k.apply([job], {"new": 2})[0].profile
    assert cold is not None and not cold.known and cold == cold_bound("unseen", None)
    assert expected_s(cold, 0.0, 0.0, 100.0) == pytest.approx(100.0)  # local at the job's goal
    assert remote_slowdown(cold) > 2.5  # remote well past it: held back while waiting can help
    for i in range(12):  # another image, learned (6 remote runs): its terms become the new image's prior
        k.observe("acme/seen", Observation(100.0 + 40.0 * (i % 2) * (1 + i / 10), float(i % 2), 0.1 * i))
    later = k.apply([job], {"new": 2})[0].profile
    assert later == cold_bound("unseen", typical_of(k.estimates.values())) and later != cold
    assert k.apply([job], {"new": 1})[0].profile == NEUTRAL  # exploring again once fewer fly


def test_the_simulated_fabric_measures_what_each_image_really_draws(tmp_path: Path) -> None:
    """Jobs draw their true profile's bandwidth whatever the policy reserved (the neutral prior's 1
    Gbit/s, at first), and each remote run reports it: the learned profiles carry the truth's."""
    from disagg.placement.registry import get_policy
    from disagg.sim.engine import SimConfig, Simulation

    truth = load_profiles(LEARNING / "truth.yaml")
    subs = read_trace(_trace(tmp_path / "t.csv", 120, 1))
    sim = Simulation(load_cluster(LEARNING / "cluster.yaml"), subs, get_policy("drmaestro-na"),
                     np.random.default_rng(1), SimConfig(interval_s=5.0, truth=truth, knowledge="learned"))
    sim.run()
    measured = {k: e for k, e in sim.knowledge.estimates.items() if e.remote_observations}
    assert len(measured) >= 2, sim.knowledge.estimates
    for image, est in measured.items():
        assert est.drawn_gbps == pytest.approx(truth[image].network_gbps)
        assert est.profile(pessimistic=True).network_gbps == pytest.approx(truth[image].network_gbps)


def test_jobs_that_name_no_image_are_neutral_and_teach_nothing() -> None:
    """`unknown` is the default of a job (or a trace row) that names no image, not an image: the controller
    learns nothing from such jobs and places them by the neutral profile, and so does the simulator."""
    from dataclasses import replace

    from disagg.model import Job, TaskRequest
    from disagg.profiles import NEUTRAL

    knowledge = knowledge_for("learned", None, None, explore=1)
    anon = Job(name="a", image="unknown", tasks=TaskRequest(1, 1.0, 1.0, {"gpu": 1}, {}))
    for _ in range(5):  # remote runs 4x slower than local ones: an image's worth of evidence
        knowledge.observe("unknown", Observation(40.0, 1.0, 0.3))
        knowledge.observe("unknown", Observation(10.0, 0.0, 0.0))
    knowledge.in_flight = {"unknown": 50}
    (seen,) = knowledge.apply([anon], {"unknown": 50})  # many in flight: no cold bound either
    assert seen.profile is NEUTRAL
    assert knowledge.report() == {"knowledge": "learned", "images": {}}
    named = replace(anon, image="acme/trainer")
    for _ in range(5):
        knowledge.observe("acme/trainer", Observation(40.0, 1.0, 0.3))
        knowledge.observe("acme/trainer", Observation(10.0, 0.0, 0.0))
    (learned,) = knowledge.apply([named])
    assert learned.profile is not None and learned.profile.known and learned.profile.name == "trainer"
