"""`disagg bench sim`: the simulator's speed targets, measured and printed as JSON (never asserted).

- `paper`: paper-128m-4096j with all six policies and one seed (target: under 60 s in all on 2 cores),
  one process per policy spread over the cores, longest first; reports per policy its wall and CPU
  seconds, simulated seconds per wall second and scheduler rounds per wall second, and the 1-minute load
  average at the start and the end (the machine may be shared: compare CPU seconds across runs, not only wall),
  and the machine's own speed (`bench.machine.machine_speed`: machines differ by 2-3x between sessions).
- `large`: a synthetic trace of 100,000 jobs on 1,000 machines with drmaestro (target: under 10 min),
  sampling the process's resident memory as jobs finish to show it stays flat.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import psutil

from disagg.bench.machine import machine_speed
from disagg.model.states import JobState
from disagg.placement.registry import FLOW_POLICIES, POLICIES, get_policy
from disagg.sim.engine import SimConfig, SimResult, simulate
from disagg.sim.metrics import summarize
from disagg.sim.scenarios import get_scenario, paper_cluster
from disagg.sim.sweep import default_workers
from disagg.sim.workload import WarmupSpec, WorkloadSpec, poisson_workload, warmup_jobs

KEYS = ("policy", "jobs", JobState.COMPLETED, "makespan_s", "qos_violations", "rounds", "wall_s", "sim_end_s",
        "sim_s_per_wall_s", "rounds_per_wall_s", "sched_latency_p50_s", "sched_latency_p99_s")


def split_wall(result: SimResult) -> dict[str, float]:
    """Where the wall time went: inside the policy's rounds, or in the simulator around them."""
    policy_s = float(sum(result.latencies_s))
    return {"policy_s": round(policy_s, 2), "engine_s": round(result.wall_s - policy_s, 2)}


#: Longest first (as measured on paper-128m-4096j), so that two workers finish close together.
PAPER_ORDER = ("firmament", "drmaestro-na", "drmaestro", "random-remote", "fifo", "greedy")


def paper_row(name: str, seed: int, interval_s: float, scenario_name: str = "paper-128m-4096j",
              max_iterations: int | None = None) -> dict[str, Any]:
    """One policy on a named scenario in this process: the summary row, its wall and CPU seconds.
    `max_iterations`: the passes a flow policy's round may make (None: its own; other policies ignore it)."""
    scenario = get_scenario(scenario_name)
    cluster = scenario.cluster()
    subs = scenario.submissions(seed, cluster)
    cpu0 = time.process_time()
    passes = max_iterations if name in FLOW_POLICIES else None
    result = simulate(cluster, subs, get_policy(name, passes), seed, SimConfig(interval_s=interval_s))
    cpu_s = time.process_time() - cpu0
    summary = summarize(result, seed)
    return {**{k: summary[k] for k in KEYS}, "cpu_s": round(cpu_s, 2), **split_wall(result)}


def bench_paper(seed: int = 1, interval_s: float = 5.0, workers: int = 0,
                scenario: str = "paper-128m-4096j", max_iterations: int | None = None) -> dict[str, Any]:
    """All six policies on paper-128m-4096j (or another named scenario, for tests), one seed: one process
    per policy on `workers` cores (0 = every core; 1 = one after another in this process). Rows in
    registry order. `max_iterations`: the flow policies' passes per round (None: their own)."""
    n = workers or default_workers()
    names = [p for p in PAPER_ORDER if p in POLICIES] + [p for p in POLICIES if p not in PAPER_ORDER]
    load0 = os.getloadavg()[0]
    machine = machine_speed()
    t0 = time.perf_counter()
    if n == 1:
        rows = {name: paper_row(name, seed, interval_s, scenario, max_iterations) for name in names}
    else:
        with ProcessPoolExecutor(max_workers=min(n, len(names))) as pool:
            futures = {name: pool.submit(paper_row, name, seed, interval_s, scenario, max_iterations)
                       for name in names}
            rows = {name: fut.result() for name, fut in futures.items()}
    total = time.perf_counter() - t0
    ordered = [rows[name] for name in POLICIES]
    return {"bench": "sim-paper", "scenario": scenario, "seed": seed, "interval_s": interval_s,
            "max_iterations": max_iterations,
            "workers": min(n, len(names)), "total_wall_s": round(total, 2),
            "total_cpu_s": round(sum(r["cpu_s"] for r in ordered), 2), "target_wall_s": 60,
            "load_avg_1m": {"start": round(load0, 2), "end": round(os.getloadavg()[0], 2)}, "machine": machine,
            "policies": ordered}


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
