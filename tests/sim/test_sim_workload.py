"""The seed's workload: Poisson arrivals at 16 jobs/s, Rodinia applications, a 50% CPU warm-up."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from disagg.profiles import RODINIA
from disagg.sim.scenarios import SCENARIOS, get_scenario, paper_cluster
from disagg.sim.workload import WarmupSpec, WorkloadSpec, poisson_workload, warmup_jobs


def test_arrivals_are_poisson_at_the_given_rate() -> None:
    subs = poisson_workload(WorkloadSpec(jobs=4000, rate_per_s=16.0), np.random.default_rng(3))
    times = np.array([s.job.submit_s for s in subs])
    gaps = np.diff(times)
    assert np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 16, rel=0.05)
    assert gaps.std() == pytest.approx(1 / 16, rel=0.1)  # exponential: std equals the mean


def test_uniform_choice_covers_all_eight_and_normal_favours_the_middle() -> None:
    uni = poisson_workload(WorkloadSpec(jobs=2000, choice="uniform"), np.random.default_rng(1))
    counts = Counter(s.job.image.split("/")[1] for s in uni)
    assert set(counts) == set(RODINIA)
    assert max(counts.values()) < 1.3 * min(counts.values())
    normal = poisson_workload(WorkloadSpec(jobs=2000, choice="normal"), np.random.default_rng(1))
    apps = sorted(RODINIA)
    ncounts = Counter(s.job.image.split("/")[1] for s in normal)
    middle = ncounts[apps[3]] + ncounts[apps[4]]
    ends = ncounts[apps[0]] + ncounts[apps[7]]
    assert middle > 2 * ends


def test_each_job_has_its_slo_above_its_base_and_a_base_near_its_profile() -> None:
    subs = poisson_workload(WorkloadSpec(jobs=800, slo_factor=1.2), np.random.default_rng(5))
    for s in subs:
        assert s.job.slo_s == pytest.approx(1.2 * s.base_s, rel=1e-6)
        assert s.job.tasks.wants("gpu") == 1
    by_app: dict[str, list[float]] = {}
    for s in subs:
        by_app.setdefault(s.job.image.split("/")[1], []).append(s.base_s)
    for app, bases in by_app.items():
        assert np.mean(bases) == pytest.approx(RODINIA[app].base_s, rel=0.05)


def test_the_same_seed_gives_the_same_jobs() -> None:
    sc = get_scenario("paper-4m-128j")
    a, b, c = sc.submissions(7), sc.submissions(7), sc.submissions(8)
    assert [(s.job, s.base_s) for s in a] == [(s.job, s.base_s) for s in b]
    assert [s.job for s in a] != [s.job for s in c]


@pytest.mark.parametrize("machines", [4, 16, 128])
def test_warmup_takes_half_the_cpus_with_whole_machine_jobs(machines: int) -> None:
    cluster = paper_cluster(machines)
    warm = warmup_jobs(cluster, WarmupSpec(cpu_share=0.5, duration_s=2000.0), np.random.default_rng(0))
    total = sum(m.cpus for m in cluster.machines)
    assert sum(w.job.tasks.cpus for w in warm) == pytest.approx(0.5 * total)
    assert all(w.warmup and not w.job.tasks.kinds for w in warm)
    assert all(w.job.tasks.cpus == cluster.machines[0].cpus for w in warm)
    assert all(1900.0 <= w.base_s <= 2100.0 for w in warm)


def test_named_scenarios_use_the_seed_testbed() -> None:
    assert set(SCENARIOS) == {"paper-4m-128j", "paper-4m-512j", "paper-16m-512j", "paper-128m-4096j",
                              "tenants-burst"}
    for sc in SCENARIOS.values():
        cluster = sc.cluster()
        assert len(cluster.machines) == sc.machines
        assert all(m.cpus == 20 and m.memory_gb == 512 for m in cluster.machines)
        assert sum(1 for d in cluster.devices if d.kind == "gpu" and d.model == "K80") == 4 * sc.machines
        assert sum(1 for s in sc.submissions(1, cluster) if not s.warmup) == sc.jobs
