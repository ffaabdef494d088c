"""`disagg bench controller`: end-to-end scheduling throughput of a real controller on a large cluster.

A real `disagg serve` (API process + loop process, as in production) on a fresh store — SQLite, or a
throw-away PostgreSQL (`disagg.store.pgtemp`) — with a synthetic cluster of `machines` machines (racks
of 40, 4 local GPUs each, a pool of 8 GPUs per rack). `clients` threads submit trivial jobs (`true` on
0.5 cpu, every other one with a GPU) at a steady total `rate` for `seconds`, one job a request or
`batch` jobs a request (POST /v1/job-batches, as a Slurm user submits a job array); then the benchmark waits
up to `drain_s` for the queue to empty. What it measures is the figure peers compare (kube-scheduler's
pods/s, Slurm's jobs/s): a job is *placed and committed* when its slice exists in the store (the job
left `queued`); composing the slice and running the task come after, in the slice workers: how many
jobs they bring to an end during the submissions is reported beside it (`ended_per_s`), not part of the
target. Submit → placed latency is the slice's `created_at` minus the client's clock just before
its POST (the same machine's wall clock), so it includes the API's answer time.

The controller's settings bound the throughput: at most `window + backfill` jobs per round and one
round per `round_gap_s` (the defaults 32 + 64 per 0.5 s: under 200 jobs/s), so they are options here.
The mean round time comes from the loop's own histogram (`disagg_placement_round_seconds` on
/metrics). The load average is reported beside every figure: the machine may be shared.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from disagg.bench.crash import forget_jobs_dir, quiet_tempdir
from disagg.model.states import JOB_FINAL, JobState

#: Machines per rack and GPUs in each rack's pool of the synthetic cluster.
RACK_SIZE = 40
POOL_GPUS = 8
#: The stores the benchmark runs on.
DB_KINDS = ("sqlite", "postgresql")

#: Told as things go: (seconds done, seconds in all, what it is doing, jobs submitted so far).
Progress = Callable[[float, float, str, int], None]


@dataclass(frozen=True)
class ControllerOptions:
    """One run's settings: the cluster, the load, and the controller's settings that bound throughput."""

    machines: int = 12_500
    gpus_per_machine: int = 4
    rate: float = 1000.0
    clients: int = 8
    seconds: float = 10.0
    db: str = "sqlite"
    window: int = 32
    backfill: int = 64
    round_gap_s: float = 0.5
    tick_s: float = 0.25
    workers: int = 16
    latency_scale: float = 0.001
    policy: str = "drmaestro-na"
    drain_s: float = 30.0
    batch: int = 1


def cluster_spec(machines: int, gpus_per_machine: int) -> dict[str, Any]:
    """The synthetic cluster as a spec document: racks of 40 machines of 32 cpus / 256 GB with local
    GPUs, a pool of 8 GPUs per rack, 25 Gbit/s machine uplinks and 400 Gbit/s rack uplinks."""
    local = {"gpu": {"model": "V100", "count": gpus_per_machine}} if gpus_per_machine else {}
    ms = [{"name": f"m{i}", "rack": f"r{i // RACK_SIZE}", "cpus": 32, "memory_gb": 256, "uplink_gbps": 25,
           **({"devices": local} if local else {})} for i in range(machines)]
    racks = (machines + RACK_SIZE - 1) // RACK_SIZE
    pools = [{"name": f"pool{r}", "rack": f"r{r}", "uplink_gbps": 100,
              "devices": {"gpu": {"model": "V100", "count": POOL_GPUS}}} for r in range(racks)]
    return {"machines": ms, "pools": pools, "network": {"rack_uplink_gbps": 400}}


def server_config(opts: ControllerOptions, root: Path, db: str, port: int) -> dict[str, Any]:
    """`disagg serve`'s settings for the run (a config file): the benchmark's cluster and bounds; a
    queue limit above what one tenant submits and no submission rate; /metrics without a token (the round
    histogram)."""
    return {"db": db, "port": port, "cluster": str(root / "cluster.json"), "state_dir": str(root / "state"),
            "policy": opts.policy, "latency_scale": opts.latency_scale, "tick_s": opts.tick_s,
            "round_gap_s": opts.round_gap_s, "window": opts.window, "backfill": opts.backfill,
            "workers": opts.workers, "max_queued_per_tenant": 10_000_000, "metrics_public": True,
            "history_every_s": 3600.0, "allow_same_user": os.geteuid() != 0,
            # the controller's throughput, not one tenant's submission rate; a throw-away store and jobs
            "submit_rate_per_tenant": 0, "allow_jobs_on_store_disk": True}


def _start_server(root: Path, port: int) -> subprocess.Popen[bytes]:
    """`disagg serve --config <root>/serve.json` in a session of its own; returns once /healthz answers."""
    log = open(root / "server.log", "ab")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen([sys.executable, "-m", "disagg.cli", "serve", "--config", str(root / "serve.json")],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    end = time.monotonic() + 300  # 12,500 machines take a while to sync into a fresh store
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {(root / 'server.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("the server did not come up in 300 s")


@dataclass
class Submissions:
    """What the clients did: each accepted job's id with the wall time just before its POST, and the
    refusals and errors by kind."""

    sent: dict[str, float]
    attempted: int
    errors: dict[str, int]


def _job_body(name: str, n: int) -> dict[str, Any]:
    """The benchmark's trivial job: `true` on half a cpu, every other one with a GPU."""
    return {"name": name, "image": "rodinia/nw", "command": ["true"], "max_retries": 0,
            "tasks": {"count": 1, "cpus": 0.5, "memory_gb": 1, "gpu": n % 2}}


def _post(client: httpx.Client, w: int, first: int, batch: int) -> tuple[list[str], str]:
    """One request of `batch` jobs (POST /v1/jobs for one, /v1/job-batches for more): the ids accepted and
    what went wrong ("" for nothing)."""
    bodies = [_job_body(f"c{w}-{first + i}", first + i) for i in range(batch)]
    try:
        if batch == 1:
            r = client.post("/v1/jobs", json=bodies[0])
            return ([r.json()["id"]], "") if r.status_code == 201 else ([], str(r.status_code))
        r = client.post("/v1/job-batches", json={"jobs": bodies})
        return ([j["id"] for j in r.json()["jobs"]], "") if r.status_code == 201 else ([], str(r.status_code))
    except httpx.HTTPError as exc:
        return [], type(exc).__name__


def _client(url: str, token: str, w: int, opts: ControllerOptions, start: float, out: Submissions,
            lock: threading.Lock) -> None:
    """One client: its share of the rate, paced by a schedule (a late client catches up, it does not skip),
    until `seconds` are up: a server slower than the rate gets fewer submissions, not a longer run. With
    `batch` > 1 each request carries that many jobs (POST /v1/job-batches), the rate still counts jobs."""
    every = opts.clients * opts.batch / opts.rate
    sent: dict[str, float] = {}
    errors: dict[str, int] = {}
    attempted = requests = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        while True:
            due = start + (requests + w / opts.clients) * every
            if due >= start + opts.seconds or time.monotonic() >= start + opts.seconds:
                break  # the schedule is done, or the time is up (a server slower than the rate)
            time.sleep(max(0.0, due - time.monotonic()))
            requests += 1
            t0 = time.time()
            ids, kind = _post(client, w, attempted + 1, opts.batch)
            attempted += opts.batch
            if kind:
                errors[kind] = errors.get(kind, 0) + opts.batch
            for job_id in ids:
                sent[job_id] = t0
    with lock:
        out.sent.update(sent)
        out.attempted += attempted
        for kind, n in errors.items():
            out.errors[kind] = out.errors.get(kind, 0) + n


def _submit(url: str, token: str, opts: ControllerOptions, progress: Progress) -> tuple[Submissions, float, float]:
    """Run the clients for `seconds`: (what they did, wall time of the start, wall time of the end).

    With this process's cyclic collector off meanwhile: a client stamps a job's submission just before
    its POST, so a pause of the benchmark's own (a full collection of its heap took 0.38 s near the end of
    a run) counted as the controller's latency for every job stamped before it."""
    out, lock = Submissions({}, 0, {}), threading.Lock()
    start, wall0 = time.monotonic(), time.time()
    threads = [threading.Thread(target=_client, args=(url, token, w, opts, start, out, lock), daemon=True)
               for w in range(opts.clients)]
    collecting = gc.isenabled()
    gc.disable()
    try:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            progress(min(time.monotonic() - start, opts.seconds), opts.seconds, "submitting", len(out.sent))
            time.sleep(0.25)
        for t in threads:
            t.join()
    finally:
        if collecting:
            gc.enable()
    return out, wall0, time.time()


def _round_metrics(url: str, root: Path) -> dict[str, float]:
    """The loop's round histogram: count and sum of `disagg_placement_round_seconds` (GET /metrics). A
    server that died under the load is reported with the end of its log (in `root`)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        answer = httpx.get(url + "/metrics", timeout=120)  # a loaded machine answers slowly
    except httpx.HTTPError as exc:
        raise RuntimeError(f"the server stopped answering ({exc}); its log ends: "
                           f"{(root / 'server.log').read_text()[-3000:]}") from None
    if answer.status_code != 200:
        raise RuntimeError(f"GET /metrics answered {answer.status_code} ({answer.text[:200]!r}); the server's log "
                           f"ends: {(root / 'server.log').read_text()[-3000:]}")
    text = answer.text
    out = {"count": 0.0, "sum": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == "disagg_placement_round_seconds":
            for sample in family.samples:
                if sample.name.endswith("_count"):
                    out["count"] = sample.value
                elif sample.name.endswith("_sum"):
                    out["sum"] = sample.value
    return out


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summarize(sent: dict[str, float], placed_at: dict[str, float], wall0: float, wall1: float) -> dict[str, Any]:
    """Throughput and latency from the submit times and each job's first slice's creation time: placed
    per second during the submissions (sustained) and until the last placement (with the drain)."""
    mine = {j: placed_at[j] for j in sent if j in placed_at}
    latencies = [max(0.0, mine[j] - sent[j]) for j in mine]
    during = sum(1 for t in mine.values() if t <= wall1)
    last = max(mine.values(), default=wall0)
    return {
        "placed": len(mine),
        "placed_during_submissions": during,
        "placed_per_s": round(during / max(wall1 - wall0, 1e-9), 1),
        "placed_per_s_with_drain": round(len(mine) / max(last - wall0, 1e-9), 1) if mine else 0.0,
        "unplaced_by_end": len(sent) - len(mine),
        "submit_to_placed_s": {k: (None if v is None else round(v, 4)) for k, v in (
            ("p50", _percentile(latencies, 50)), ("p90", _percentile(latencies, 90)),
            ("p99", _percentile(latencies, 99)), ("max", max(latencies, default=None)))},
    }


def process_memory(pid: int) -> dict[str, float] | None:
    """A process's resident memory now and at its peak (`VmRSS`, `VmHWM` of /proc/<pid>/status), MB;
    None when it is gone or /proc does not say."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    kb = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in lines) if k in ("VmRSS", "VmHWM")}
    if len(kb) != 2:
        return None
    return {"rss": round(kb["VmRSS"] / 1024, 1), "peak": round(kb["VmHWM"] / 1024, 1)}


def server_processes(pid: int) -> dict[str, int]:
    """The API process (`pid`, the `disagg serve` started) and its scheduling loop, the child forked from
    it (`control.split`: the same command line; the tasks' runners are the loop's children, not its)."""
    from disagg.engines.local import child_pids

    out = {"api": pid}
    try:
        own = Path(f"/proc/{pid}/cmdline").read_bytes()
        for child in child_pids(pid):
            if Path(f"/proc/{child}/cmdline").read_bytes() == own:
                out["loop"] = child
    except OSError:
        pass
    return out


def memory_over(samples: dict[str, dict[str, dict[str, float] | None]]) -> dict[str, dict[str, float | None]]:
    """Per process, its resident MB at each sample (in order: after start-up, after the submissions,
    after the drain) and its peak by the last: a loop whose memory grows with the jobs it has seen (a
    leak) shows as a rise from sample to sample that a run of twice the jobs doubles."""
    out: dict[str, dict[str, float | None]] = {}
    for when, found in samples.items():
        for name, mem in found.items():
            row = out.setdefault(name, {})
            row[when] = None if mem is None else mem["rss"]
            if mem is not None:
                row["peak"] = max(mem["peak"], row.get("peak") or 0.0)
    return out


def _memory(processes: dict[str, int]) -> dict[str, dict[str, float] | None]:
    return {name: process_memory(pid) for name, pid in processes.items()}


def _ended(store: Any) -> int:
    """The jobs in a final state now (the store was fresh: every one of them is the run's). Placement is
    half of the way to a job's end: the slice workers compose its slice, run its task and tear the slice
    down after, and how many jobs they bring to an end per second is the figure beside `placed_per_s`
    that says whether the cluster runs work as fast as it is placed."""
    counts = store.counts()["jobs"]
    return sum(n for state, n in counts.items() if JobState(state) in JOB_FINAL)


def _drain(store: Any, sent: dict[str, float], opts: ControllerOptions, progress: Progress) -> None:
    """Wait until every accepted job is placed, or `drain_s` passed."""
    end = time.monotonic() + opts.drain_s
    while time.monotonic() < end:
        queued = store.queued_counts()
        left = sum(queued.values())
        progress(opts.drain_s - (end - time.monotonic()), opts.drain_s, f"draining ({left} queued)", len(sent))
        if left == 0:
            return
        time.sleep(0.5)


def _measure(opts: ControllerOptions, root: Path, db: str, progress: Progress) -> dict[str, Any]:
    """Start the server on `db`, load it, drain, and read the results back from the store and /metrics."""
    from disagg.store import Store
    from disagg.store.pgtemp import free_port

    (root / "cluster.json").write_text(json.dumps(cluster_spec(opts.machines, opts.gpus_per_machine)))
    port = free_port()
    (root / "serve.json").write_text(json.dumps(server_config(opts, root, db, port)))
    store = Store(db)
    store.migrate()
    token = store.create_token("bench")
    url = f"http://127.0.0.1:{port}"
    progress(0, opts.seconds, f"starting a controller on {opts.machines} machines", 0)
    t_start = time.monotonic()
    proc = _start_server(root, port)
    try:
        startup_s = time.monotonic() - t_start
        processes = server_processes(proc.pid)
        memory = {"after_startup": _memory(processes)}
        rounds0, load0 = _round_metrics(url, root), os.getloadavg()
        subs, wall0, wall1 = _submit(url, token, opts, progress)
        ended = _ended(store)  # (what the slice workers ran to an end meanwhile: read at once)
        rounds1 = _round_metrics(url, root)
        load1 = os.getloadavg()
        memory["after_submissions"] = _memory(processes)
        _drain(store, subs.sent, opts, progress)
        rounds2 = _round_metrics(url, root)
        memory["after_drain"] = _memory(processes)
        placed_at = store.first_placed_at()  # when each job was placed and committed
        by_state = store.counts()["jobs"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the API and its loop process
        proc.wait()
        store.close()
    n = rounds1["count"] - rounds0["count"]
    n_all = rounds2["count"] - rounds0["count"]
    return {
        "startup_s": round(startup_s, 1),
        "offered": int(opts.rate * opts.seconds), "submitted": subs.attempted, "accepted": len(subs.sent),
        "errors": subs.errors,
        "submissions_per_s": round(len(subs.sent) / max(wall1 - wall0, 1e-9), 1),
        "submit_seconds": round(wall1 - wall0, 2),
        **summarize(subs.sent, placed_at, wall0, wall1),
        "ended_during_submissions": ended,
        "ended_per_s": round(ended / max(wall1 - wall0, 1e-9), 1),
        "rounds": {"during_submissions": int(n), "with_drain": int(n_all),
                   "mean_round_s": round((rounds1["sum"] - rounds0["sum"]) / n, 4) if n else None,
                   "mean_round_s_with_drain": round((rounds2["sum"] - rounds0["sum"]) / n_all, 4) if n_all else None},
        "jobs_by_state": by_state,
        "memory_mb": memory_over(memory),
        "loadavg": {"before": [round(v, 2) for v in load0], "after_submissions": [round(v, 2) for v in load1]},
    }


def run_controller_bench(opts: ControllerOptions, progress: Progress | None = None) -> dict[str, Any]:
    """One run on a fresh store of kind `opts.db`; the JSON the command prints."""
    from disagg.store.pgtemp import TempPostgres

    tell: Progress = progress or (lambda *_: None)
    pg: TempPostgres | None = None
    with quiet_tempdir("disagg-bench-controller-") as root:
        try:
            if opts.db == "postgresql":
                pg = TempPostgres().start()
                db = pg.create_database("bench")
            else:
                db = f"sqlite:///{root / 'bench.db'}"
            result = _measure(opts, root, db, tell)
        finally:
            if pg is not None:
                pg.stop()
            forget_jobs_dir(root / "state")
    latency = result["submit_to_placed_s"]
    return {
        "benchmark": "controller", "store": opts.db, "options": asdict(opts), **result,
        "target": ">= 1,000 jobs placed and committed per s on SQLite at 12,500 machines, submit->placed p99 <= 2 s",
        "target_met": bool(result["placed_per_s"] >= 1000 and latency["p99"] is not None and latency["p99"] <= 2.0
                           and result["unplaced_by_end"] == 0),
    }
