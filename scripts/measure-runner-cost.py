#!/usr/bin/env python3
"""Runner cost per job: PSS of the controller-side processes of N sleeping jobs (runner, bwrap's two), and
launch-to-end latency of a `true` job (issue 22; as root). Run with the tree to measure on PYTHONPATH:

    PYTHONPATH=src .venv/bin/python scripts/measure-runner-cost.py [N]

Prints one JSON object. `CPUS` in the environment sets each job's cpu limit (default 0.001).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from disagg.engines.base import SliceMachine, SliceSpec
from disagg.engines.local import Isolation, LocalEngine

CPUS = float(os.environ.get("CPUS", "0.001"))


def spec(slice_id: str, command: list[str]) -> SliceSpec:
    machine = SliceMachine(slice_id + "m", "n", CPUS, 0.1, ())
    return SliceSpec(slice_id=slice_id, job_id="j", command=tuple(command), machines=(machine,), tasks=1, tenant="t")


def read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def pss_kb(pid: int) -> int:
    """The process's proportional set size (shared pages split between their users), kB."""
    for line in (read(f"/proc/{pid}/smaps_rollup") or "").splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        kids = [int(c) for c in (read(f"/proc/{p}/task/{p}/children") or "").split()]
        out += kids
        todo += kids
    return out


def comm(pid: int) -> str:
    return (read(f"/proc/{pid}/comm") or "?").strip()


def true_job_latencies(engine: LocalEngine, n: int = 8) -> list[float]:
    """Launch to end of `true`, n times, sorted (seconds)."""
    out = []
    for i in range(n):
        handle = engine.prepare_task(spec(f"s-lat{os.getpid()}-{i}", ["true"]))
        start = time.perf_counter()
        engine.launch_task(handle)
        while not engine.status(handle).state.ended:
            time.sleep(0.002)
        out.append(time.perf_counter() - start)
        engine.cancel(handle)
    return sorted(out)


def runner_pss(engine: LocalEngine, n: int) -> tuple[int, int]:
    """(controller-side processes, their PSS in kB) of n sleeping jobs (the jobs' own `sleep` left out)."""
    handles = []
    for i in range(n):
        handle = engine.prepare_task(spec(f"s-pss{os.getpid()}-{i}", ["sleep", "60"]))
        engine.launch_task(handle)
        handles.append(handle)
    time.sleep(3)
    total, procs = 0, 0
    for handle in handles:
        pid = json.loads((engine.root / handle / "started").read_text())["pid"]
        mine = [pid] + [p for p in descendants(pid) if comm(p) != "sleep"]
        procs += len(mine)
        total += sum(pss_kb(p) for p in mine)
    for handle in handles:
        engine.cancel(handle)
    return procs, total


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    root = Path(tempfile.mkdtemp(prefix="i22meas-"))
    jobs_dir = Path("/var/lib/disagg-i22meas/jobs") / str(os.getpid())
    isolation = Isolation(cgroup_parent="disagg-i22meas", jobs_dir=jobs_dir)
    engine = LocalEngine(root / "state" / "tasks", isolation=isolation)
    lat = true_job_latencies(engine)
    procs, total = runner_pss(engine, n)
    print(json.dumps({
        "jobs": n, "controller_side_processes": procs, "pss_mb_total": round(total / 1024, 1),
        "pss_mb_per_job": round(total / 1024 / n, 2), "true_job_latency_ms_median": round(lat[len(lat) // 2] * 1000, 1),
        "true_job_latency_ms_min": round(lat[0] * 1000, 1),
        "sandbox": "sandbox" in inspect.signature(Isolation).parameters,
    }))


if __name__ == "__main__":
    main()
