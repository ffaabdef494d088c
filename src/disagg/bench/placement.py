"""`disagg bench placement`: one round on a synthetic cluster; JSON numbers, no assertions."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from ortools.graph.python import min_cost_flow

from disagg.bench.machine import machine_speed
from disagg.bench.synthetic import rodinia_queue, synthetic_cluster, with_learned_profiles, with_tenants
from disagg.model import Cluster, Job
from disagg.placement.base import Clock, Policy
from disagg.placement.decisions import Decisions
from disagg.placement.fairness import FairPolicy
from disagg.placement.registry import get_policy
from disagg.placement.state import forget_kept_inventory

IntArray = NDArray[np.int64]


def peak_rss_mb() -> float:
    """Peak resident set of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_placement_bench(machines: int, gpus_per_machine: int, pending: int, policy: str, seed: int,
                        repeat: int = 1, tenants: int = 0, learned_images: int = 0) -> dict[str, Any]:
    """One round, `repeat` times on the same inputs timed by the wall clock, then `repeat` times timed
    by this process's CPU clock; the fastest of each is reported (the others only differ by what else
    the machine was doing). The CPU-clock rounds give the steadier split between Python and solver
    on a shared machine: another process's load stretches wall time, not this process's CPU time.

    `tenants` > 0: the same round with that many tenants (`synthetic.with_tenants`) and the policy
    inside `FairPolicy`; the numbers are that round's, and `plain_*` those of the round without.
    `learned_images` > 0: the same round with every job an image of a learned table of that many
    (`synthetic.with_learned_profiles`), against the shipped table's."""
    cluster = synthetic_cluster(machines, gpus_per_machine, seed)
    queue = rodinia_queue(pending, seed)
    if tenants > 0:
        return _with_tenants(cluster, queue, machines, pending, policy, seed, repeat, tenants)
    if learned_images > 0:
        return _with_learned(cluster, queue, policy, seed, repeat, learned_images)
    chosen = get_policy(policy)
    _best_round(chosen, cluster, queue, seed, 1, time.process_time)  # the process's own first-use costs
    forget_kept_inventory()
    cold = _best_round(chosen, cluster, queue, seed, 1, time.process_time)
    wall = _best_round(chosen, cluster, queue, seed, repeat, time.perf_counter)
    cpu = _best_round(chosen, cluster, queue, seed, repeat, time.process_time)
    bare = bare_solve_s(cluster, queue, repeat, seed)
    decisions = wall.decisions
    t, c = decisions.timings, cpu.decisions.timings
    return {
        "policy": policy,
        "machines": machines,
        "gpus": len(cluster.devices),
        "pending": pending,
        "placed": len(decisions.placed),
        "remote_devices": sum(p.remote_devices for p in decisions.placed),
        "build_s": round(t.get("build_s", 0.0), 4),
        "solve_s": round(t.get("solve_s", 0.0), 4),
        "decode_s": round(t.get("decode_s", 0.0), 4),
        "round_s": round(t.get("round_s", 0.0), 4),
        # CPU time of the round that was fastest by the wall clock (the round the wall-clock figures describe).
        "round_cpu_s": round(wall.cpu_s, 4),
        # The fastest round by the CPU clock (what `round_cpu_over_bare` divides): steadier than wall time on
        # a shared machine, and not `round_cpu_s`, whose round was chosen by the wall clock.
        "round_cpu_best_s": round(cpu.round_s, 4),
        # The first round on this inventory (CPU): it reads the machines and devices that later rounds
        # find kept (`placement.state.inventory_arrays`), as a controller's first round does.
        "cold_round_cpu_s": round(cold.round_s, 4),
        "python_over_solver_wall": _python_over_solver(t),
        # The same split from the rounds timed by the CPU clock (the number to compare with the target).
        "cpu_build_s": round(c.get("build_s", 0.0), 4),
        "cpu_solve_s": round(c.get("solve_s", 0.0), 4),
        "cpu_decode_s": round(c.get("decode_s", 0.0), 4),
        "python_over_solver": _python_over_solver(c),
        "repeat": max(1, repeat),
        # The yardstick: OR-Tools alone on a Firmament-style graph of this size (`bare_solve_s`).
        "bare_solve_s": round(bare, 4),
        "round_over_bare": round(t.get("round_s", 0.0) / bare, 2) if bare > 0 else None,
        "round_cpu_over_bare": round(cpu.round_s / bare, 2) if bare > 0 else None,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        **{f"stat_{k}": v for k, v in decisions.stats.items()},
        "machine": machine_speed(),
    }


def _with_tenants(cluster: Cluster, queue: list[Job], machines: int, pending: int, policy: str, seed: int,
                  repeat: int, tenants: int) -> dict[str, Any]:
    """The round with tenants and the plain one, alternately timed (same machine load for both)."""
    fair_cluster, fair_queue = with_tenants(cluster, queue, tenants, seed)
    fair, plain = FairPolicy(get_policy(policy)), get_policy(policy)
    fair_best = plain_best = None
    for _ in range(max(1, repeat)):
        r = _best_round(plain, cluster, queue, seed, 1, time.process_time)
        plain_best = r if plain_best is None or r.round_s < plain_best.round_s else plain_best
        r = _best_round(fair, fair_cluster, fair_queue, seed, 1, time.process_time)
        fair_best = r if fair_best is None or r.round_s < fair_best.round_s else fair_best
    assert fair_best is not None and plain_best is not None
    d, p = fair_best.decisions, plain_best.decisions
    return {
        "policy": policy, "machines": machines, "gpus": len(cluster.devices), "pending": pending, "tenants": tenants,
        "placed": len(d.placed), "plain_placed": len(p.placed), "preempted": len(d.preempted),
        "quota_refused": d.stats.get("quota_refused", 0),
        # CPU seconds of the round (the fastest of `repeat`), with tenants and without
        "round_cpu_s": round(fair_best.round_s, 4), "plain_round_cpu_s": round(plain_best.round_s, 4),
        "fairness_cpu_s": round(d.timings.get("fairness_s", 0.0), 4),
        "with_over_without": round(fair_best.round_s / plain_best.round_s, 3) if plain_best.round_s > 0 else None,
        "repeat": max(1, repeat), "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def _with_learned(cluster: Cluster, queue: list[Job], policy: str, seed: int, repeat: int, images: int
                  ) -> dict[str, Any]:
    """The round with a learned table of `images` images and the shipped one, alternately timed."""
    learned_queue = with_learned_profiles(queue, images, seed)
    chosen = get_policy(policy)
    best: dict[str, _Round] = {}
    for _ in range(max(1, repeat)):
        for name, jobs in (("shipped", queue), ("learned", learned_queue)):
            r = _best_round(chosen, cluster, jobs, seed, 1, time.process_time)
            if name not in best or r.round_s < best[name].round_s:
                best[name] = r
    learned, shipped = best["learned"], best["shipped"]
    return {
        "policy": policy, "machines": len(cluster.machines), "gpus": len(cluster.devices), "pending": len(queue),
        "learned_images": images, "placed": len(learned.decisions.placed),
        "shipped_placed": len(shipped.decisions.placed),
        "remote_devices": sum(p.remote_devices for p in learned.decisions.placed),
        "shipped_remote_devices": sum(p.remote_devices for p in shipped.decisions.placed),
        # CPU seconds of the round (the fastest of `repeat`), with the learned table and the shipped one
        "round_cpu_s": round(learned.round_s, 4), "shipped_round_cpu_s": round(shipped.round_s, 4),
        "learned_over_shipped": round(learned.round_s / shipped.round_s, 3) if shipped.round_s > 0 else None,
        "repeat": max(1, repeat), "peak_rss_mb": round(peak_rss_mb(), 1),
    }


@dataclass
class _Round:
    round_s: float
    cpu_s: float
    decisions: Decisions


def _best_round(chosen: Policy, cluster: Cluster, queue: list[Job], seed: int, repeat: int,
                clock: Clock) -> _Round:
    """Each round gets a snapshot of its own (the same parts, as the simulator and the controller
    build one per round), so no round reuses the indexes a snapshot builds on first use; what the
    placement keeps of an inventory between rounds (`placement.state.inventory_arrays`) it does reuse,
    as the controller's and the simulator's rounds do while no device changes health."""
    best: _Round | None = None
    for _ in range(max(1, repeat)):
        snapshot = replace(cluster)  # (keeps its tenancy, if any)
        cpu_start = time.process_time()
        decisions = chosen.place(snapshot, queue, 0.0, np.random.default_rng(seed), clock=clock)
        cpu_s = time.process_time() - cpu_start
        if best is None or decisions.timings["round_s"] < best.round_s:
            best = _Round(decisions.timings["round_s"], cpu_s, decisions)
    assert best is not None
    return best


#: Direct task → machine arcs per task in `firmament_graph` (Quincy's preference arcs).
BARE_PREFERRED = 8


def firmament_graph(cluster: Cluster, queue: list[Job], seed: int) -> tuple[IntArray, ...]:
    """Firmament's flow model (Gog et al., OSDI '16; Quincy's arcs) for this round: one node per task,
    each with an arc to the cluster aggregator X, to its unscheduled aggregator U (a cost that rises
    with its age) and to BARE_PREFERRED machines of its own (drawn with `seed`, priced below X's);
    X → every machine, capacity its free slots for the smallest task, cost rising with how busy its cpus
    are (load spreading); machine → sink and U → sink. About as many arcs as the round's phase 1 had
    before machine classes (≈ 130,000 at 12,500 machines and 10,000 jobs). Arrays: tails, heads,
    capacities, costs, supplies per node."""
    rng = np.random.default_rng(seed)
    n_tasks = sum(j.tasks.count for j in queue)
    n_machines = len(cluster.machines)
    taken = np.zeros(n_machines)
    index = {m.name: i for i, m in enumerate(cluster.machines)}
    for a in cluster.allocations:
        taken[index[a.machine]] += a.cpus
    total = np.array([m.cpus for m in cluster.machines])
    free = np.maximum(total - taken, 0)
    smallest = min((j.tasks.cpus for j in queue), default=1.0)
    slots = np.floor(free / max(smallest, 1e-9)).astype(np.int64)
    x, mach0 = n_tasks, n_tasks + 1
    u, sink = mach0 + n_machines, mach0 + n_machines + 1
    tasks = np.arange(n_tasks, dtype=np.int64)
    machines = np.arange(n_machines, dtype=np.int64)
    busy = np.rint(1_000 * taken / np.maximum(total, 1e-9)).astype(np.int64)
    pref_tails = np.repeat(tasks, BARE_PREFERRED)
    pref_heads = rng.integers(0, n_machines, size=len(pref_tails))
    pref_costs = busy[pref_heads] + rng.integers(0, 500, size=len(pref_tails)) - 250
    tails = np.concatenate([tasks, tasks, pref_tails, np.full(n_machines, x), mach0 + machines, [u]])
    heads = np.concatenate([np.full(n_tasks, x), np.full(n_tasks, u), mach0 + pref_heads, mach0 + machines,
                            np.full(n_machines, sink), [sink]])
    caps = np.concatenate([np.ones(2 * n_tasks + len(pref_tails), dtype=np.int64), slots, slots, [n_tasks]])
    age = 1_000 + (n_tasks - tasks)  # older tasks wait at a higher price
    costs = np.concatenate([np.full(n_tasks, 250, dtype=np.int64), 10_000 + age, pref_costs, busy,
                            np.zeros(n_machines + 1, dtype=np.int64)])
    supplies = np.zeros(sink + 1, dtype=np.int64)
    supplies[:n_tasks] = 1
    supplies[sink] = -n_tasks
    return (tails.astype(np.int64), heads.astype(np.int64), caps.astype(np.int64), costs.astype(np.int64),
            supplies)


def bare_solve_s(cluster: Cluster, queue: list[Job], repeat: int, seed: int = 1) -> float:
    """OR-Tools' min-cost flow alone (the solver every flow policy uses, `placement.solver`) on
    `firmament_graph` of this round: the CPU seconds of `solve()` only, the fastest of `repeat`.
    The yardstick the issue sets a round against (a round ≤ 1.5x it)."""
    tails, heads, caps, costs, supplies = firmament_graph(cluster, queue, seed)
    nodes = np.nonzero(supplies)[0]
    best = float("inf")
    for _ in range(max(1, repeat)):
        smcf = min_cost_flow.SimpleMinCostFlow()
        smcf.add_arcs_with_capacity_and_unit_cost(tails, heads, caps, costs)
        smcf.set_nodes_supplies(nodes, supplies[nodes])
        start = time.process_time()
        status = smcf.solve()
        best = min(best, time.process_time() - start)
        if status != smcf.OPTIMAL:
            raise RuntimeError(f"the bare solve failed with status {status}")
    return best


def _python_over_solver(timings: dict[str, float]) -> float | None:
    """Everything in the round but the solver (building, decoding, and the bookkeeping between
    phases that is neither), over the solver. None when no solver ran (the sequential policies, an
    empty queue): a ratio over nothing would print as a huge, meaningless number."""
    solve = timings.get("solve_s", 0.0)
    if solve <= 0.0:
        return None
    python = timings.get("round_s", 0.0) - solve
    return round(python / solve, 2)
