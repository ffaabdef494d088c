"""Grids of runs (scenario × policy × seed): one at a time, in parallel on local cores, or on Ray.

A `RunSpec` is plain, picklable data. Named scenarios are regenerated inside the worker from their
name and seed (cheap, and nothing large crosses the process boundary); a trace run carries its cluster
and submissions. Every run is independent and deterministic for its seed, so the grid gives the same
results however it is spread; only the wall-clock numbers (latency, wall_s) depend on the machine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from disagg.model import Cluster
from disagg.model.tenants import Tenants
from disagg.placement.registry import get_policy
from disagg.profiles.learn import EXPLORE
from disagg.profiles.table import ProfileTable
from disagg.sim.engine import FailureModel, SimConfig, simulate
from disagg.sim.report import RunOutput, run_output
from disagg.sim.scenarios import get_scenario
from disagg.sim.workload import Submission


@dataclass(frozen=True)
class TraceSource:
    """A workload read from a trace, on a cluster read from a spec."""

    name: str
    cluster: Cluster
    submissions: tuple[Submission, ...]


@dataclass(frozen=True)
class RunSpec:
    """One run: a scenario name (or a trace source), a policy name, a seed and the round interval.

    `tenants`: the tenants spec (None: the scenario's own, if it has one); `fairness` False runs the
    plain policy even so (tenants are still reported when the workload has several)."""

    scenario: str
    policy: str
    seed: int
    interval_s: float = 5.0
    source: TraceSource | None = None
    failures: FailureModel | None = None
    tenants: Tenants | None = None
    fairness: bool = True
    starvation_rounds: int | None = None
    #: How jobs run (`--truth`), what the policies know (`sim.learning.KNOWLEDGE`), the table given.
    truth: ProfileTable | None = None
    knowledge: str = "shipped"
    profiles: ProfileTable | None = None
    explore: int = EXPLORE


def grid(scenarios: Sequence[str], policies: Sequence[str], seeds: Sequence[int], interval_s: float,
         source: TraceSource | None = None, failures: FailureModel | None = None, tenants: Tenants | None = None,
         fairness: bool = True, starvation_rounds: int | None = None) -> list[RunSpec]:
    """Every combination, scenario-major so results come out grouped as the tables show them."""
    return [RunSpec(sc, p, s, interval_s, source, failures, tenants, fairness, starvation_rounds)
            for sc in scenarios for p in policies for s in seeds]


def run_one(spec: RunSpec, progress: Callable[[float], None] | None = None) -> RunOutput:
    """Simulate one spec in this process. `progress` gets the finished share (0..1) now and then."""
    tenants = spec.tenants
    if spec.source is not None:
        cluster, subs = spec.source.cluster, list(spec.source.submissions)
    else:
        scenario = get_scenario(spec.scenario)
        cluster = scenario.cluster()
        subs = scenario.submissions(spec.seed, cluster)
        tenants = tenants if tenants is not None else scenario.tenants()
    several = len({s.job.tenant for s in subs}) > 1
    config = SimConfig(interval_s=spec.interval_s, failures=spec.failures,
                       tenants=tenants if spec.fairness else None, report_tenants=several or tenants is not None,
                       starvation_rounds=spec.starvation_rounds, truth=spec.truth, knowledge=spec.knowledge,
                       profiles=spec.profiles, explore=spec.explore)
    result = simulate(cluster, subs, get_policy(spec.policy), spec.seed, config, progress=progress)
    out = run_output(spec.scenario, result, spec.seed)
    if spec.knowledge != "shipped":  # runs of one policy with different knowledge, told apart in the tables
        out.summary["policy"] = f"{out.summary['policy']} ({spec.knowledge})"
        out.summary["knowledge"] = spec.knowledge
    return out


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def run_local(specs: Sequence[RunSpec], workers: int = 0,
              on_done: Callable[[RunOutput], None] | None = None) -> list[RunOutput]:
    """Run the specs on a process pool of `workers` (0 = every core); results in spec order."""
    n = workers or default_workers()
    if n == 1 or len(specs) == 1:
        outs = []
        for spec in specs:
            out = run_one(spec)
            if on_done:
                on_done(out)
            outs.append(out)
        return outs
    results: dict[int, RunOutput] = {}
    with ProcessPoolExecutor(max_workers=min(n, len(specs))) as pool:
        futures = {pool.submit(run_one, spec): i for i, spec in enumerate(specs)}
        for fut in as_completed(futures):
            out = fut.result()
            results[futures[fut]] = out
            if on_done:
                on_done(out)
    return [results[i] for i in range(len(specs))]


def run_ray(specs: Sequence[RunSpec], address: str,
            on_done: Callable[[RunOutput], None] | None = None) -> list[RunOutput]:
    """Run the specs as Ray tasks on the cluster at `address` (host:port, or "auto"); spec order kept.

    Connects as a driver and disconnects at the end; starts nothing of its own.
    """
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is pinned in pyproject
        raise RuntimeError("Ray is not installed; pip install 'ray==2.60.0'") from exc
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1)(run_one)
        pending = {remote.remote(spec): i for i, spec in enumerate(specs)}
        results: dict[int, RunOutput] = {}
        waiting = list(pending)
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            for ref in done:
                out = ray.get(ref)
                results[pending[ref]] = out
                if on_done:
                    on_done(out)
        return [results[i] for i in range(len(specs))]
    finally:
        ray.shutdown()
