"""`disagg bench slices`: what composing a slice costs with its steps in parallel vs one after another.

Slices of 1×4, 2×2 and 4×1 machines×GPUs on the emulated FlowOS-RM testbed (seed 000), through the
real slice state machine (every step recorded in a SQLite store, the emulated fabric, the local
engine). The testbed's latencies are scaled by `scale` to keep the run short; results are given
both as measured and scaled back to the testbed's seconds.

  construct_s  attach-device + launch-machine: the seed's "slice construction"
  compose_s    construction + prepare-task + launch-task (until the job runs)
  teardown_s   stop-task + detach-device + destroy-machine
  slowest_step_s  the longest single step of the construction
The target: construction with parallel steps within 1.2x of its slowest step.

`fabric="redfish"`: the same slices composed through Redfish — a second disagg, in this process, serves
the emulated testbed as a CompositionService, and the slices' fabric is the `redfish` driver speaking to
it (its cluster spec discovered from it), so each launch-machine composes a system there.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from disagg.fabric.emulated import OperationLatencies
from disagg.model.states import SliceOutcome, SliceState

SHAPES = ((1, 4), (2, 2), (4, 1))


def _redfish(root: Path, scale: float) -> tuple[Any, Any, Any]:
    """(fabric, cluster, close): the `redfish` driver on a disagg that serves the testbed over Redfish."""
    from fastapi.testclient import TestClient

    from disagg.api import create_app
    from disagg.control.config import Config
    from disagg.control.service import open_service
    from disagg.fabric.redfish import RedfishFabric
    from disagg.fabric.redfish_client import RedfishClient
    from disagg.fabric.redfish_discovery import discover
    from disagg.model import parse_cluster

    a = open_service(Config(db=f"sqlite:///{root / 'a.db'}", state_dir=str(root / "a"), latency_scale=scale,
                            tick_s=0.005, round_gap_s=0.005, api_process=False,
                            redfish_updatable=False,  # composed at once, as docs/benchmarks.md measured
                            allow_jobs_on_store_disk=True))  # a throw-away store in a temporary directory
    a.controller.start()
    token = a.store.create_token("bench")
    http = TestClient(create_app(a.jobs))
    client = RedfishClient(str(http.base_url), "bench", token, transport=http._transport, task_poll_s=0.005)
    spec, _ = discover(client)
    cluster = parse_cluster(spec, "discovered")

    def close() -> None:
        client.close()
        a.close()

    return RedfishFabric(cluster, client, "bench"), cluster, close


def _one(root: Path, machines: int, gpus: int, parallel: bool, scale: float, fabric_name: str = "emulated"
         ) -> dict[str, float]:
    # imported here: the store and the controller load only when the benchmark runs
    from disagg.control.service import DEFAULT_CLUSTER
    from disagg.control.slice import SliceRunner
    from disagg.engines.local import Isolation, LocalEngine
    from disagg.fabric.emulated import EmulatedFabric
    from disagg.model import load_cluster
    from disagg.placement.decisions import Decisions, DeviceGrant, JobPlacement, TaskPlacement
    from disagg.store import Store, new_job_row

    latencies = OperationLatencies().scaled(scale)
    if fabric_name == "redfish":
        fabric, cluster, close_fabric = _redfish(root, scale)
    else:
        cluster = load_cluster(DEFAULT_CLUSTER)
        fabric = EmulatedFabric(root / "fabric.db", cluster, latencies)
        close_fabric = fabric.close
    store = Store(f"sqlite:///{root / 'bench.db'}")
    store.migrate()
    store.sync_inventory(cluster)
    # as `disagg serve` runs it: as root the job runs as the tenant's user; not as root, as this user
    isolation = Isolation(allow_same_user=os.geteuid() != 0,
                          cgroup_parent=os.environ.get("DISAGG_CGROUP_PARENT", "disagg"))
    engine = LocalEngine(root / "tasks", latencies, isolation)
    runner = SliceRunner(store, fabric, engine, parallel=parallel)
    gpu_ids = [d.id for d in cluster.devices if d.kind == "gpu"]
    # a job stored as a submission is, and a hand-made plan committed as a round's would be
    job = new_job_row("bench", {"name": "bench", "image": "unknown", "command": ["true"], "max_retries": 0,
                                "tasks": {"count": machines, "cpus": 1, "memory_gb": 1, "gpu": gpus}},
                      None, None, time.time())
    writer = store.submissions()
    writer.insert(job).result()
    writer.close()
    tasks = tuple(
        TaskPlacement(f"{job['id']}/{i}", f"node{i}", 1.0, 1.0, tuple(
            DeviceGrant(gpu_ids[i * gpus + k], "gpu", True, "iobox0", ("up:iobox0", f"up:node{i}"), 1.0)
            for k in range(gpus)))
        for i in range(machines))
    slice_id = store.commit_placements(Decisions("bench", placed=(JobPlacement(job["id"], tasks),)),
                                       [job["id"]]).placed[0][1]
    t0 = time.perf_counter()
    runner.compose(slice_id)
    compose_s = time.perf_counter() - t0
    steps = store.slice_steps(slice_id)
    state = store.load_slice(slice_id).state
    if state != SliceState.RUNNING:
        raise RuntimeError(f"the benchmark slice did not compose (it is {state})")
    construct = [st for st in steps if st.op in ("attach-device", "launch-machine")]
    construct_s = max(st.ended_at or 0 for st in construct) - min(st.started_at or 0 for st in construct)
    slowest = max((st.ended_at or 0) - (st.started_at or 0) for st in construct)
    runner.abort(slice_id, SliceOutcome.COMPLETED, "benchmark done")
    t1 = time.perf_counter()
    runner.teardown(slice_id)
    teardown_s = time.perf_counter() - t1
    engine.forget(slice_id)
    shutil.rmtree(engine.jobs_dir, ignore_errors=True)  # outside `root` as root (/var/lib/disagg/jobs)
    store.close()
    close_fabric()
    return {"construct_s": construct_s, "compose_s": compose_s, "teardown_s": teardown_s, "slowest_step_s": slowest}


def run_slices_bench(scale: float = 0.05, repeats: int = 2, fabric: str = "emulated") -> dict[str, Any]:
    """Median over `repeats` of each shape × {serial, parallel}; seconds measured and at testbed scale.

    `fabric`: `emulated` (the testbed's fabric) or `redfish` (composing through Redfish, module docstring)."""
    from rich.progress import Progress

    results = []
    with Progress(transient=True, console=None) as progress:
        task = progress.add_task("composing slices", total=len(SHAPES) * 2 * repeats)
        for machines, gpus in SHAPES:
            row: dict[str, Any] = {"shape": f"{machines}x{gpus}", "machines": machines, "gpus_per_machine": gpus}
            for mode, parallel in (("serial", False), ("parallel", True)):
                runs = []
                for _ in range(repeats):
                    with tempfile.TemporaryDirectory(prefix="disagg-bench-") as d:
                        runs.append(_one(Path(d), machines, gpus, parallel, scale, fabric))
                    progress.advance(task)
                med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                row[mode] = {k: round(v, 4) for k, v in med.items()}
                row[mode + "_testbed_s"] = {k: round(v / scale, 2) for k, v in med.items()} if scale else {}
            row["speedup_construct"] = round(row["serial"]["construct_s"] / row["parallel"]["construct_s"], 2)
            row["parallel_construct_over_slowest_step"] = round(
                row["parallel"]["construct_s"] / row["parallel"]["slowest_step_s"], 3)
            row["parallel_compose_over_slowest_step"] = round(
                row["parallel"]["compose_s"] / row["parallel"]["slowest_step_s"], 3)
            results.append(row)
    return {"benchmark": "slices", "fabric": fabric, "scale": scale, "repeats": repeats,
            "latencies_testbed_s": OperationLatencies().__dict__, "shapes": results,
            "target": "parallel construction within 1.2x of its slowest step",
            "target_met": all(r["parallel_construct_over_slowest_step"] <= 1.2 for r in results)}
