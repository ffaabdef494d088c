"""What a run is judged by: the seed's makespan and QoS violations, and what explains them.

Definitions (docs/simulator.md repeats them):
- makespan: last completion minus first submission, over the workload's jobs (warm-up excluded);
- QoS violation: a job whose execution time (start to finish) exceeds its SLO τ;
- normalized execution time: execution time over the job's base time (alone, local devices, idle
  network) — the seed's Fig. 10 sorts these from worst to best;
- GPU utilization: GPU-seconds in use over (GPUs × makespan), in the makespan window;
- remote GPU share: remote GPU grants over all GPU grants of the workload's jobs;
- scheduler latency: wall seconds of the policy's round (the only wall-clock number besides wall_s).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from disagg.model.states import JobState
from disagg.sim.engine import JobRecord, SimResult


def workload(records: list[JobRecord]) -> list[JobRecord]:
    """The jobs that count: warm-up jobs are scaffolding, not results."""
    return [r for r in records if not r.warmup]


def normalized_exec(records: list[JobRecord]) -> NDArray[np.float64]:
    """Execution time / base time of every finished workload job (1.0 = as fast as alone and local)."""
    vals = [(r.finish_s - r.start_s) / r.base_s for r in workload(records)
            if not math.isnan(r.finish_s) and r.base_s > 0]
    return np.array(vals, dtype=np.float64)


def gpu_busy_seconds(times: NDArray[np.float64], in_use: NDArray[np.float64], t0: float, t1: float) -> float:
    """Integral of the step function `in_use` (changing at `times`) over [t0, t1]."""
    if t1 <= t0 or len(times) == 0:
        return 0.0
    edges = np.append(times, np.inf)
    lo = np.clip(edges[:-1], t0, t1)
    hi = np.clip(edges[1:], t0, t1)
    return float(np.sum(in_use * (hi - lo)))


def summarize(result: SimResult, seed: int) -> dict[str, Any]:
    """One row of the `--json` results: the keys the issue fixes, plus counters that explain them."""
    recs = workload(result.records)
    done = [r for r in recs if not math.isnan(r.finish_s)]
    first_submit = min((r.submit_s for r in recs), default=0.0)
    last_finish = max((r.finish_s for r in done), default=first_submit)
    makespan = last_finish - first_submit if done else 0.0
    violations = sum(1 for r in done if r.slo_s is not None and (r.finish_s - r.start_s) > r.slo_s + 1e-9)
    gpus = sum(r.gpus for r in done)
    remote = sum(r.remote_gpus for r in done)
    lat = np.asarray(result.latencies_s, dtype=np.float64)
    times, in_use = np.asarray(result.gpu_times), np.asarray(result.gpu_in_use)
    busy = gpu_busy_seconds(times, in_use, first_submit, last_finish)
    util = busy / (result.total_gpus * makespan) if result.total_gpus and makespan > 0 else 0.0
    norm = normalized_exec(result.records)
    wall = result.wall_s
    return {
        "policy": result.policy,
        "seed": seed,
        "jobs": len(recs),
        JobState.COMPLETED: len(done),
        "makespan_s": round(makespan, 3),
        "qos_violations": violations,
        "mean_jct_s": round(float(np.mean([r.finish_s - r.submit_s for r in done])) if done else 0.0, 3),
        "gpu_utilization": round(util, 4),
        "remote_gpu_share": round(remote / gpus, 4) if gpus else 0.0,
        "sched_latency_p50_s": float(np.percentile(lat, 50)) if len(lat) else 0.0,
        "sched_latency_p99_s": float(np.percentile(lat, 99)) if len(lat) else 0.0,
        "wall_s": round(wall, 3),
        "mean_wait_s": round(float(np.mean([r.start_s - r.submit_s for r in done])) if done else 0.0, 3),
        "mean_normalized_exec": round(float(norm.mean()), 4) if len(norm) else 0.0,
        "rounds": result.rounds,
        "conflicts": result.conflicts,
        "restarts": result.counters.get("restarts", 0),
        "stalled": result.stalled,
        # Placed knowing they would likely miss their SLO (the network-aware policy), and the jobs the
        # run ended with still waiting, each with the policy's last reason (issue 14).
        "slo_at_risk": result.counters.get("slo_at_risk", 0),
        "stalled_jobs": [{"job": job, "reason": why} for job, why in result.stalled_jobs],
        "sim_end_s": round(result.sim_end_s, 3),
        "sim_s_per_wall_s": round(result.sim_end_s / wall, 1) if wall > 0 else 0.0,
        "rounds_per_wall_s": round(result.rounds / wall, 1) if wall > 0 else 0.0,
    }
