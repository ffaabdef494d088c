#!/usr/bin/env python3
"""Runner cost per job: PSS of the controller-side processes of N sleeping jobs (runner, bwrap's two), and
launch-to-end latency of a `true` job (issue 22; as root). Run with the tree to measure on PYTHONPATH:

    PYTHONPATH=src .venv/bin/python scripts/measure-runner-cost.py [N]
"""
import json, os, sys, tempfile, time, inspect
from pathlib import Path
from disagg.engines.local import LocalEngine, Isolation
from disagg.engines.base import SliceSpec, SliceMachine
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20
root = Path(tempfile.mkdtemp(prefix="i22meas-"))
kw = {"cgroup_parent": "disagg-i22meas", "jobs_dir": Path("/var/lib/disagg-i22meas/jobs") / str(os.getpid())}
e = LocalEngine(root / "state" / "tasks", isolation=Isolation(**kw))
def spec(sid, cmd, cpus=float(os.environ.get("CPUS", "0.001"))):
    return SliceSpec(slice_id=sid, job_id="j", command=tuple(cmd), machines=(SliceMachine(sid + "m", "n", cpus, 0.1, ()),), tasks=1, tenant="t")
def pss(pid):
    try:
        for line in open(f"/proc/{pid}/smaps_rollup"):
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0
def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(c) for c in open(f"/proc/{p}/task/{p}/children").read().split()]
        except OSError:
            kids = []
        out += kids; todo += kids
    return out
def comm(p):
    try: return open(f"/proc/{p}/comm").read().strip()
    except OSError: return "?"
# latency of a trivial job
lat = []
for i in range(8):
    h = e.prepare_task(spec(f"s-lat{os.getpid()}-{i}", ["true"]))
    t0 = time.perf_counter(); e.launch_task(h)
    while not e.status(h).state.ended: time.sleep(0.002)
    lat.append(time.perf_counter() - t0); e.cancel(h)
hs = []
for i in range(N):
    h = e.prepare_task(spec(f"s-pss{os.getpid()}-{i}", ["sleep", "60"])); e.launch_task(h); hs.append(h)
time.sleep(3)
total, procs = 0, 0
for h in hs:
    pid = json.loads((e.root / h / "started").read_text())["pid"]
    mine = [pid] + [p for p in descendants(pid) if comm(p) != "sleep"]
    procs += len(mine); total += sum(pss(p) for p in mine)
for h in hs:
    e.cancel(h)
lat.sort()
print(json.dumps({"jobs": N, "controller_side_processes": procs, "pss_mb_total": round(total / 1024, 1),
                  "pss_mb_per_job": round(total / 1024 / N, 2), "true_job_latency_ms_median": round(lat[len(lat)//2] * 1000, 1),
                  "true_job_latency_ms_min": round(lat[0] * 1000, 1), "sandbox": "sandbox" in inspect.signature(Isolation).parameters}))
