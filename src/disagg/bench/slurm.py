"""Benchmark: how long composing a slice on Slurm takes, step by step, against a plain `sbatch`.

For each slice shape (machines × GPUs: 1×4, 2×2, 4×1, FlowOS-RM's three configurations) on a
throw-away Slurm with four static nodes of four fake GPUs each:

- disagg: launch-machine (the slice machines join as dynamic nodes, in parallel) → prepare-task
  (held `sbatch`) → launch-task (`scontrol release`) → the job is seen RUNNING;
- baseline: one plain `sbatch` pinned to static nodes with the same GPU counts → seen RUNNING.

Both sides are polled the same way (`squeue -j <id> -h -o %T` every 10 ms). The result is JSON:
per-shape medians of every step, the totals and `ratio = disagg total / sbatch total` (the cost
of composing). Teardown (cancel + destroy-machine) is reported apart: it is off the critical path.

`controller` (in the same JSON) measures the whole path through the controller: `POST /v1/jobs`
→ placed (a scheduling round) → attach-device, launch-machine, prepare-task, launch-task (spans
taken from the slice's recorded steps) → the job seen running by its engine, for the Slurm engine
and for the local engine on the same inventory. The emulated fabric's latencies are set to zero
there, so the numbers are the controller's and the engines' own costs.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console
from rich.progress import Progress

from disagg.engines.base import Engine, SliceMachine, SliceSpec
from disagg.engines.slurm import SlurmEngine
from disagg.engines.slurm_cluster import SlurmCluster, default_nodes
from disagg.engines.slurm_site import SlurmError, SlurmSite
from disagg.model.states import JobState, RunState, SliceState

if TYPE_CHECKING:
    from disagg.store import Store

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
    spec = SliceSpec(sid, sid, ("sleep", "300"), machines, tasks=machines_n, tenant="bench")
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


CONTROLLER_STEPS = ("placed", "attach-device", "launch-machine", "prepare-task", "launch-task", "to_running")


def _inventory(site: SlurmSite, path: Path) -> Path:
    """The controller's cluster for the site: its static nodes as machines with their GPUs, and a pool."""
    machines = [{"name": n.machine, "rack": "r0", "cpus": n.cpus, "memory_gb": 64, "uplink_gbps": 40,
                 "devices": {"gpu": {"model": "P100", "count": len(n.gpus)}}} for n in site.static_nodes]
    pools = [{"name": "pool0", "rack": "r0", "uplink_gbps": 40, "devices": {"gpu": {"model": "P100", "count": 4}}}]
    path.write_text(yaml.safe_dump({"machines": machines, "pools": pools}))
    return path


def _controller_trial(client: Any, headers: dict[str, str], engine: Engine, store: Store,
                      shape: str) -> dict[str, float]:
    """POST a job of `shape`, follow it to running on its engine, cancel it; step spans in seconds."""
    machines_n, gpus = SHAPES[shape]
    t0 = time.perf_counter()
    r = client.post("/v1/jobs", headers=headers, json={
        "name": f"bench-{shape}", "command": ["sleep", "300"],
        "tasks": {"count": machines_n, "cpus": 1.0, "memory_gb": 1.0, "gpu": gpus}})
    if r.status_code != 201:
        raise RuntimeError(f"POST /v1/jobs answered {r.status_code}: {r.text}")
    job_id = r.json()["id"]
    deadline = time.monotonic() + 60
    while True:
        job = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
        if job["state"] == JobState.RUNNING:
            break
        if job["state"] in (JobState.FAILED, JobState.CANCELLED, JobState.COMPLETED) or time.monotonic() > deadline:
            errors = [(st.slice_id, st.op, st.target, st.error) for st in store.slice_steps() if st.error]
            raise RuntimeError(f"benchmark job {job_id} did not reach running: {job['state']} "
                               f"{job['reason']}; step errors: {errors}")
        time.sleep(_POLL_S)
    record = store.load_slice(job["slice"])
    handle = record.handle or record.id
    while engine.status(handle).state != RunState.RUNNING:
        if time.monotonic() > deadline:
            raise RuntimeError(f"benchmark job {job_id} never ran on the engine: {engine.status(handle)}")
        time.sleep(_POLL_S)
    total = time.perf_counter() - t0
    seen_running = time.time()
    steps = store.slice_steps(record.id)
    out = {"placed": record.created_at - float(job["submitted_at"])}
    for op in CONTROLLER_STEPS[1:-1]:
        spans = [(st.started_at, st.ended_at) for st in steps if st.op == op and st.started_at and st.ended_at]
        out[op] = (max(e for _, e in spans if e) - min(s for s, _ in spans if s)) if spans else 0.0
    launched = max((st.ended_at or 0.0) for st in steps if st.op == "launch-task")
    out["to_running"] = max(0.0, seen_running - launched)
    out["total"] = total
    client.post(f"/v1/jobs/{job_id}/cancel", headers=headers)
    while True:   # let teardown finish before the next trial
        if store.load_slice(job["slice"]).state == SliceState.DONE:
            break
        if time.monotonic() > deadline + 30:
            raise RuntimeError(f"benchmark slice {job['slice']} did not tear down")
        time.sleep(_POLL_S)
    return out


def controller_bench(site: SlurmSite, engine_name: str, repeats: int, shapes: Sequence[str],
                     advance: Callable[[], None]) -> dict[str, Any]:
    """POST → running through a real controller (SQLite, zero fabric latency) on `engine_name`."""
    from fastapi.testclient import TestClient

    from disagg.api import create_app
    from disagg.control.config import Config
    from disagg.control.service import open_service

    with tempfile.TemporaryDirectory(prefix="disagg-bench-ctl-") as tmp:
        root = Path(tmp)
        settings = Config(db=f"sqlite:///{root / 'disagg.db'}", cluster=str(_inventory(site, root / "c.yaml")),
                            state_dir=str(root / "state"), latency_scale=0.0, tick_s=0.01, engine=engine_name,
                            slurm_site=str(site.save()),
                            allow_jobs_on_store_disk=True)  # a throw-away store in a temporary directory
        svc = open_service(settings)
        svc.controller.start()
        try:
            headers = {"Authorization": f"Bearer {svc.store.create_token('bench')}"}
            out: dict[str, Any] = {}
            with TestClient(create_app(svc.jobs)) as client:
                for shape in shapes:
                    samples = []
                    for _ in range(repeats):
                        samples.append(_controller_trial(client, headers, svc.engine, svc.store, shape))
                        advance()
                    out[shape] = {"steps_s": {k: _median([s[k] for s in samples]) for k in CONTROLLER_STEPS},
                                  "total_s": _median([s["total"] for s in samples]),
                                  "samples_total_s": [round(s["total"], 4) for s in samples]}
            return out
        finally:
            svc.close()


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
    # the bar goes to stderr: stdout is the JSON
    with cluster, Progress(console=Console(stderr=True), disable=not show_progress) as bar:
        engine = SlurmEngine(cluster.site)
        # warm-up: the first job after slurmctld starts is slow (≈ 3 s, docs/slurm.md)
        sbatch_trial(cluster.site, "1x4")
        task = bar.add_task("slurm slices", total=3 * repeats * len(shapes))
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
        ctl = {name: controller_bench(cluster.site, name, repeats, shapes, lambda: bar.advance(task))
               for name in ("slurm", "local")}
        for shape in shapes:
            ctl_slurm, ctl_local = ctl["slurm"][shape]["total_s"], ctl["local"][shape]["total_s"]
            plain = result["shapes"][shape]["sbatch_s"]
            ctl["slurm"][shape]["ratio_vs_sbatch"] = round(ctl_slurm / plain, 3) if plain > 0 else None
            ctl["slurm"][shape]["ratio_vs_local"] = round(ctl_slurm / ctl_local, 3) if ctl_local > 0 else None
        result["controller"] = {"fabric_latency_s": 0.0, "steps": [*CONTROLLER_STEPS], **ctl}
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m disagg.bench.slurm [--repeats N] [--shapes 1x4,2x2,4x1] [--out FILE]`: JSON on stdout.

    `disagg bench slices --engine slurm` calls `run_slurm_slices_bench` the same way.
    """
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(prog="python -m disagg.bench.slurm", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--out", default=None, help="also write the JSON to this file")
    args = parser.parse_args(argv)
    try:
        result = run_slurm_slices_bench(args.repeats, [s for s in args.shapes.split(",") if s])
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except SlurmError as exc:   # not root, Slurm not installed, a daemon did not start
        sys.stderr.write(f"error: cannot run a throw-away Slurm: {exc}\n")
        return 1
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
