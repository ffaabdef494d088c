"""Benchmark: how long composing a slice on Slurm takes, step by step, against a plain `sbatch`.

For each slice shape (machines × GPUs: 1×4, 2×2, 4×1, FlowOS-RM's three configurations) on a
throw-away Slurm with four static nodes of four fake GPUs each:

- disagg: launch-machine (the slice machines join as dynamic nodes, in parallel) → prepare-task
  (held `sbatch`) → launch-task (`scontrol release`) → the job is seen RUNNING;
- baseline: one plain `sbatch` pinned to static nodes with the same GPU counts → seen RUNNING.

Both sides are polled the same way (`squeue -j <id> -h -o %T` every 10 ms). The result is JSON:
per-shape medians of every step, the totals and `ratio = disagg total / sbatch total` (the cost
of composing). Teardown (cancel + destroy-machine) is reported apart: it is off the critical path.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.progress import Progress

from disagg.engines.base import SliceMachine, SliceSpec
from disagg.engines.slurm import SlurmEngine
from disagg.engines.slurm_cluster import SlurmCluster, default_nodes
from disagg.engines.slurm_site import SlurmError, SlurmSite

SHAPES: dict[str, tuple[int, int]] = {"1x4": (1, 4), "2x2": (2, 2), "4x1": (4, 1)}
STEPS = ("launch_machine", "prepare_task", "launch_task", "to_running")
_POLL_S = 0.01


def _wait_running(site: SlurmSite, job_id: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = site.run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False).stdout.strip()
        if state == "RUNNING":
            return
        if state in ("FAILED", "CANCELLED", "COMPLETED", "NODE_FAIL"):
            raise SlurmError(f"benchmark job {job_id} ended {state} before it was seen running")
        time.sleep(_POLL_S)
    raise SlurmError(f"benchmark job {job_id} not running within {timeout_s} s")


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def disagg_trial(engine: SlurmEngine, shape: str, trial: int) -> tuple[dict[str, float], float]:
    """One slice through launch → running on the Slurm engine. Returns (step seconds, teardown seconds)."""
    machines_n, gpus = SHAPES[shape]
    sid = f"bench-{shape}-{trial}"
    machines = tuple(
        SliceMachine(f"b{shape}t{trial}-{i}", f"m{i}", 2, 4,
                     tuple(f"m{i}/gpu{j}" for j in range(gpus)))
        for i in range(machines_n)
    )
    spec = SliceSpec(sid, sid, ("sleep", "300"), machines, tasks=machines_n)
    steps: dict[str, float] = {}
    with ThreadPoolExecutor(max_workers=len(machines)) as pool:
        steps["launch_machine"] = _timed(
            lambda: list(pool.map(lambda m: engine.launch_machine(spec, m), machines)))
    handle = ""

    def prepare() -> None:
        nonlocal handle
        handle = engine.prepare_task(spec)

    steps["prepare_task"] = _timed(prepare)
    job_id = str(engine.slurm_job_id(handle))
    steps["launch_task"] = _timed(lambda: engine.site.run(["scontrol", "release", job_id]))
    steps["to_running"] = _timed(lambda: _wait_running(engine.site, job_id))
    steps["total"] = sum(steps[s] for s in STEPS)
    t0 = time.perf_counter()
    engine.cancel(handle)
    with ThreadPoolExecutor(max_workers=len(machines)) as pool:
        list(pool.map(lambda m: engine.destroy_machine(spec, m), machines))
    return steps, time.perf_counter() - t0


def sbatch_trial(site: SlurmSite, shape: str) -> float:
    """A plain `sbatch` on static nodes with the same GPU counts: seconds from submit to running."""
    machines_n, gpus = SHAPES[shape]
    nodes = ",".join(f"n{i}" for i in range(machines_n))
    t0 = time.perf_counter()
    job_id = site.run(["sbatch", "--parsable", "-p", "static", f"--nodelist={nodes}", f"--nodes={machines_n}",
                       f"--ntasks={machines_n}", f"--gres=gpu:{gpus}", "-o", "/dev/null",
                       "--wrap", "srun sleep 300"]).stdout.strip().split(";")[0]
    _wait_running(site, job_id)
    elapsed = time.perf_counter() - t0
    site.run(["scancel", job_id], check=False)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:   # let the nodes free up before the next trial
        state = site.run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False).stdout.strip()
        if state in ("", "CANCELLED"):
            break
        time.sleep(_POLL_S)
    return elapsed


def _median(xs: Sequence[float]) -> float:
    return round(statistics.median(xs), 4)


def run_slurm_slices_bench(repeats: int = 5, shapes: Sequence[str] = tuple(SHAPES),
                           show_progress: bool = True) -> dict[str, Any]:
    """Start a throw-away Slurm, run `repeats` trials per shape on both sides, return the JSON result."""
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise ValueError(f"unknown slice shape(s) {unknown}; known: {sorted(SHAPES)}")
    if repeats < 1:
        raise ValueError(f"repeats must be ≥ 1, got {repeats}")
    version = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True, check=False).stdout.strip()
    result: dict[str, Any] = {"benchmark": "slices", "engine": "slurm", "slurm": version, "repeats": repeats,
                              "steps": [*STEPS], "shapes": {}}
    cluster = SlurmCluster(nodes=default_nodes(count=4, gpus=4))
    with cluster, Progress(disable=not show_progress) as bar:
        engine = SlurmEngine(cluster.site)
        # warm-up: the first job after slurmctld starts is slow (≈ 3 s, docs/slurm.md)
        sbatch_trial(cluster.site, "1x4")
        task = bar.add_task("slurm slices", total=repeats * len(shapes))
        for shape in shapes:
            samples: list[dict[str, float]] = []
            teardown: list[float] = []
            baseline: list[float] = []
            for trial in range(repeats):
                steps, down = disagg_trial(engine, shape, trial)
                samples.append(steps)
                teardown.append(down)
                baseline.append(sbatch_trial(cluster.site, shape))
                bar.advance(task)
            total = _median([s["total"] for s in samples])
            plain = _median(baseline)
            result["shapes"][shape] = {
                "steps_s": {step: _median([s[step] for s in samples]) for step in STEPS},
                "total_s": total,
                "sbatch_s": plain,
                "ratio": round(total / plain, 3) if plain > 0 else None,
                "teardown_s": _median(teardown),
                "samples_total_s": [round(s["total"], 4) for s in samples],
                "samples_sbatch_s": [round(b, 4) for b in baseline],
            }
    return result
