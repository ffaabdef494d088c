"""`disagg bench sim`: the simulator's speed targets, measured and printed as JSON (never asserted).

- `paper`: paper-128m-4096j with all six policies and one seed (target: under 60 s in all on 2 cores);
  reports simulated seconds per wall second and scheduler rounds per wall second per policy.
- `large`: a synthetic trace of 100,000 jobs on 1,000 machines with drmaestro (target: under 10 min),
  sampling the process's resident memory as jobs finish to show it stays flat.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import numpy as np
import psutil
import typer

from disagg.placement.registry import POLICIES, get_policy
from disagg.sim.engine import SimConfig, SimResult, simulate
from disagg.sim.metrics import summarize
from disagg.sim.scenarios import get_scenario, paper_cluster
from disagg.sim.workload import WarmupSpec, WorkloadSpec, poisson_workload, warmup_jobs

KEYS = ("policy", "jobs", "completed", "makespan_s", "qos_violations", "rounds", "wall_s", "sim_end_s",
        "sim_s_per_wall_s", "rounds_per_wall_s", "sched_latency_p50_s", "sched_latency_p99_s")


def split_wall(result: SimResult) -> dict[str, float]:
    """Where the wall time went: inside the policy's rounds, or in the simulator around them."""
    policy_s = float(sum(result.latencies_s))
    return {"policy_s": round(policy_s, 2), "engine_s": round(result.wall_s - policy_s, 2)}


def bench_paper(seed: int = 1, interval_s: float = 5.0) -> dict[str, Any]:
    """All six policies on paper-128m-4096j, one seed, one after another in this process."""
    scenario = get_scenario("paper-128m-4096j")
    cluster = scenario.cluster()
    subs = scenario.submissions(seed, cluster)
    rows = []
    t0 = time.perf_counter()
    for name in POLICIES:
        result = simulate(cluster, subs, get_policy(name), seed, SimConfig(interval_s=interval_s))
        summary = summarize(result, seed)
        rows.append({**{k: summary[k] for k in KEYS}, **split_wall(result)})
    total = time.perf_counter() - t0
    return {"bench": "sim-paper", "scenario": scenario.name, "seed": seed, "interval_s": interval_s,
            "total_wall_s": round(total, 2), "target_wall_s": 60, "policies": rows}


def bench_large(jobs: int = 100_000, machines: int = 1000, seed: int = 1, rate_per_s: float = 16.0,
                interval_s: float = 5.0, policy: str = "drmaestro") -> dict[str, Any]:
    """A synthetic trace on a big testbed; RSS sampled at every 10% of finished jobs."""
    cluster = paper_cluster(machines)
    rng = np.random.default_rng(seed)
    t_gen = time.perf_counter()
    subs = warmup_jobs(cluster, WarmupSpec(), rng) + poisson_workload(
        WorkloadSpec(jobs=jobs, rate_per_s=rate_per_s), rng)
    gen_s = time.perf_counter() - t_gen
    proc = psutil.Process()
    samples: list[dict[str, float]] = []
    next_mark = [0.0]
    t0 = time.perf_counter()

    def sample(share: float) -> None:
        if share + 1e-9 >= next_mark[0]:
            samples.append({"finished_share": round(share, 3), "rss_mb": round(proc.memory_info().rss / 2**20, 1),
                            "wall_s": round(time.perf_counter() - t0, 1)})
            next_mark[0] += 0.1

    result = simulate(cluster, subs, get_policy(policy), seed, SimConfig(interval_s=interval_s), progress=sample)
    summary = summarize(result, seed)
    sample(1.0)
    summary.update(split_wall(result))
    rss = [s["rss_mb"] for s in samples]
    return {"bench": "sim-large", "jobs": jobs, "machines": machines, "policy": policy, "rate_per_s": rate_per_s,
            "generate_s": round(gen_s, 2), "target_wall_s": 600,
            **{k: summary[k] for k in (*KEYS[1:], "policy_s", "engine_s")},
            "rss_mb_first": rss[0] if rss else 0.0, "rss_mb_max": max(rss, default=0.0),
            "rss_samples": samples}


def bench_sim(
    which: Annotated[str, typer.Argument(help="paper (paper-128m-4096j × six policies) or large "
                                              "(100,000 jobs on 1,000 machines).")] = "paper",
    jobs: Annotated[int, typer.Option(min=1, help="large: jobs in the synthetic trace.")] = 100_000,
    machines: Annotated[int, typer.Option(min=1, help="large: machines.")] = 1000,
    seed: Annotated[int, typer.Option()] = 1,
    interval: Annotated[float, typer.Option(min=0.001, help="Seconds between rounds (simulated).")] = 5.0,
) -> None:
    """Simulator benchmarks; prints one JSON object."""
    if which == "paper":
        out = bench_paper(seed, interval)
    elif which == "large":
        out = bench_large(jobs, machines, seed, interval_s=interval)
    else:
        sys.stderr.write(f"error: unknown benchmark {which!r}; known: paper, large\n")
        raise typer.Exit(2)
    sys.stdout.write(json.dumps(out) + "\n")
