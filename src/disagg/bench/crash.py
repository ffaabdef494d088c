"""`disagg bench crash`: kill -9 of the controller at random moments, then check the world.

A real `disagg serve` runs in a forked child (the parent has imported everything, so a restart costs
a fraction of a second) on SQLite with the emulated testbed sped up by `scale`. It is killed with
SIGKILL at a random moment — during start-up and reconciliation, while slices compose, while tasks
run, while slices tear down — restarted, killed again, `trials` times. Every job's tasks log when
they start and end. After every other kill the world is reconciled in-process (the same
`open_service` a restart runs; the other kills are reconciled by the restarted server itself) and
these invariants are checked:
  - no device is attached (on the fabric or in the store) without a live slice that holds it;
  - no slice is lost (every slice ever seen is still in the store);
  - every composing/running job has exactly one live slice; a queued job has none;
  - no runner lives without its live slice, and no job has two.
At the end the server runs undisturbed until every job has completed; the tasks' logs must show
that no job ever ran twice at the same time. `tests/control/test_control_crash.py` runs 50 trials.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import httpx
import typer

from disagg.control.split import group_gone

if TYPE_CHECKING:
    from disagg.control.service import Service

# The store, SQLAlchemy and the service are imported where they are used: every `disagg` command
# imports this module (to register `bench crash`), and most need none of them.


class ForkedServer:
    """`disagg serve` in a forked child with its output in `<root>/server.log`; killed with SIGKILL."""

    def __init__(self, root: Path, db: str, options: list[str]) -> None:
        self.root, self.db, self.options = root, db, options
        from disagg.store.pgtemp import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.pid = 0

    def start(self) -> None:
        argv = ["disagg", "serve", "--db", self.db, "--port", str(self.port), "--state-dir",
                str(self.root / "state"), *self.options]
        pid = os.fork()
        if pid == 0:  # the child: become the server, never return into the caller
            try:
                os.setsid()
                fd = os.open(self.root / "server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the caller's may be captured
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                sys.argv = argv
                from disagg.cli import main

                main()
            finally:
                os._exit(0)
        self.pid = pid

    def ready(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
            if done:
                raise RuntimeError((self.root / "server.log").read_text()[-3000:])
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.03)
        raise RuntimeError("the server did not come up")

    def kill(self) -> None:
        """SIGKILL to the server's process group (the API and its loop process), no cleanup of any kind."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # killed before it made its own group: it has no loop process yet
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        if not group_gone(self.pid):
            raise RuntimeError(f"processes of the killed server {self.pid} still run")


def job_body(rng: random.Random, events: Path, i: int) -> dict[str, Any]:
    """A job whose tasks log their start and end (job, slice, task, time) to `events`."""
    cmd = (f"echo start $DISAGG_JOB $DISAGG_SLICE $DISAGG_TASK_INDEX $(date +%s.%N) >> {events}; "
           f"sleep {rng.choice([0.05, 0.2, 0.5])}; "
           f"echo end $DISAGG_JOB $DISAGG_SLICE $DISAGG_TASK_INDEX $(date +%s.%N) >> {events}")
    return {"name": f"crash-{i}", "image": "rodinia/nw", "command": ["sh", "-c", cmd], "max_retries": 10,
            "tasks": {"count": rng.choice([1, 1, 2]), "cpus": 1.0, "memory_gb": 1.0,
                      "gpu": rng.choice([0, 1, 1, 2])}}


def invariant_violations(svc: Service, seen_slices: set[str], final: bool = False) -> list[str]:
    """What is wrong with a reconciled, quiescent world (empty when nothing is)."""
    from sqlalchemy import select

    from disagg.store import LIVE_SLICE_STATES
    from disagg.store.models import DeviceRow, JobRow, SliceRow

    bad: list[str] = []
    with svc.store.read() as s:
        slices = {r.id: r for r in s.scalars(select(SliceRow))}
        jobs = {r.id: r for r in s.scalars(select(JobRow))}
        devices = list(s.scalars(select(DeviceRow)))
    live = {sid: r for sid, r in slices.items() if r.state in LIVE_SLICE_STATES}
    if not seen_slices <= set(slices):
        bad.append(f"slices lost: {sorted(seen_slices - set(slices))}")
    seen_slices |= set(slices)
    holds = {(d, m["host"]) for r in live.values() for m in r.placement["machines"] for d in m["devices"]}
    bad += [f"{a.device} attached to {a.machine} without a slice" for a in svc.fabric.attachments()
            if (a.device, a.machine) not in holds]
    bad += [f"{d.id} held by gone slice {d.slice_id}" for d in devices
            if d.slice_id is not None and d.slice_id not in live]
    per_job: dict[str, list[str]] = defaultdict(list)
    for sid, r in live.items():
        per_job[r.job_id].append(sid)
    bad += [f"job {jid} has {len(sids)} live slices" for jid, sids in per_job.items() if len(sids) > 1]
    for jid, j in jobs.items():
        if j.state in ("composing", "running") and not (j.slice_id in live and live[j.slice_id].job_id == jid):
            bad.append(f"job {jid} is {j.state} without its slice")
        if j.state == "queued" and jid in per_job:
            bad.append(f"queued job {jid} still has a live slice")
    running: dict[str, int] = defaultdict(int)
    handles: Callable[[], list[str]] = getattr(svc.engine, "handles", list)
    for h in handles():
        if svc.engine.status(h).state == "running":
            if h not in live:
                bad.append(f"a runner of slice {h} lives without its slice")
            else:
                running[live[h].job_id] += 1
    bad += [f"job {jid} runs {n} times" for jid, n in running.items() if n > 1]
    if final:
        if live or svc.fabric.attachments():
            bad.append(f"at the end, {len(live)} slices are live and {len(svc.fabric.attachments())} attached")
        bad += [f"job {j.id} ended {j.state}: {j.reason}" for j in jobs.values() if j.state != "completed"]
    return bad


def event_violations(events: Path, job_ids: set[str]) -> tuple[list[str], dict[str, int]]:
    """Jobs that ran twice at the same time or never ran; and how many runs each job had."""
    spans: dict[tuple[str, str, str], list[float]] = {}
    text = events.read_text() if events.exists() else ""
    for line in text.splitlines():
        what, job, slice_id, task, at = line.split()
        spans.setdefault((job, slice_id, task), [float("nan"), float("nan")])[0 if what == "start" else 1] = float(at)
    runs: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for (job, slice_id, _task), (start, end) in spans.items():
        lo, hi = runs[job].get(slice_id, [float("inf"), float("-inf")])
        runs[job][slice_id] = [min(lo, start), max(hi, end if end == end else float("inf"))]
    bad = [f"job {j} never ran" for j in sorted(job_ids - set(runs))]
    for job, by_slice in runs.items():
        ordered = sorted(by_slice.values())
        bad += [f"job {job} ran twice at the same time" for (_, end1), (start2, _) in itertools.pairwise(ordered)
                if end1 > start2]
    return bad, {job: len(by_slice) for job, by_slice in runs.items()}


def run_crash_trials(root: Path, trials: int = 50, seed: int = 5, scale: float = 0.01,
                     on_trial: Any = None, db: str | None = None) -> dict[str, Any]:
    """Kill the controller `trials` times at random moments; return what was checked and found.

    `db`: an empty store to use (a PostgreSQL URL, say); by default an SQLite file under `root`.
    """
    from disagg.control.service import Settings, open_service
    from disagg.store import Store

    t0 = time.perf_counter()
    rng = random.Random(seed)
    db = db or f"sqlite:///{root / 'disagg.db'}"
    events = root / "events"
    store = Store(db)
    store.migrate()
    headers = {"Authorization": f"Bearer {store.create_token('admin', admin=True)}"}
    dialect = store.dialect
    store.close()
    settings = Settings(db=db, state_dir=str(root / "state"), latency_scale=scale)
    server = ForkedServer(root, db, ["--latency-scale", str(scale), "--tick-s", "0.02", "--round-gap-s", "0.02"])
    pending: list[tuple[str, dict[str, Any]]] = []
    submitted: dict[str, str] = {}
    seen: set[str] = set()
    violations: list[str] = []
    checks = during_startup = 0

    def submit_pending() -> None:
        for key, body in list(pending):
            r = httpx.post(server.url + "/v1/jobs", json=body, headers={**headers, "Idempotency-Key": key}, timeout=5)
            if r.status_code != 201:
                raise RuntimeError(f"submission refused: {r.status_code} {r.text}")
            submitted[key] = r.json()["id"]
            pending.remove((key, body))

    for trial in range(trials):
        server.start()
        if rng.random() < 0.2:
            during_startup += 1
            time.sleep(rng.uniform(0.0, 0.6))  # during start-up, migrations, reconciliation
        else:
            server.ready()
            for _ in range(rng.randint(1, 2)):
                pending.append((uuid.uuid4().hex, job_body(rng, events, len(submitted) + len(pending) + 1)))
            with contextlib.suppress(httpx.HTTPError):  # retried with the same key after the restart
                submit_pending()
            time.sleep(rng.uniform(0.0, 0.8))
        server.kill()
        if trial % 2 == 0:  # reconcile as a restart would, then look at the world
            svc = open_service(settings)
            try:
                violations += [f"after kill {trial + 1}: {v}" for v in invariant_violations(svc, seen)]
                checks += 1
            finally:
                svc.close()
        if on_trial is not None:
            on_trial(trial)
    server.start()
    server.ready()
    submit_pending()
    end = time.monotonic() + 120
    while True:
        jobs = httpx.get(server.url + "/v1/jobs", headers=headers, timeout=5).json()["jobs"]
        tearing = httpx.get(server.url + "/v1/slices?state=tearing-down", headers=headers, timeout=5).json()
        if all(j["state"] == "completed" for j in jobs) and not tearing["slices"]:
            break
        if time.monotonic() > end:
            violations.append("jobs did not finish within 120 s after the last kill")
            break
        time.sleep(0.2)
    server.kill()
    svc = open_service(settings)
    try:
        violations += [f"at the end: {v}" for v in invariant_violations(svc, seen, final=True)]
    finally:
        svc.close()
    bad_events, runs = event_violations(events, set(submitted.values()))
    violations += bad_events
    per_job = sorted(runs.values())
    return {"benchmark": "crash", "store": dialect, "trials": trials, "seed": seed, "scale": scale, "kills": trials,
            "kills_during_startup": during_startup, "checks": checks + 1, "jobs": len(submitted),
            "slices": len(seen), "runs_per_job": {"min": per_job[0] if per_job else 0,
                                                  "max": per_job[-1] if per_job else 0},
            "violations": violations, "seconds": round(time.perf_counter() - t0, 1)}


def bench_crash(
    trials: Annotated[int, typer.Option(min=1, max=100_000, help="How many times to kill -9 the controller.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed of the kill moments and the jobs.")] = 5,
    scale: Annotated[float, typer.Option(min=0.001, max=1.0, help="Scale of the testbed's latencies.")] = 0.01,
    backend: Annotated[
        list[str], typer.Option(help="sqlite and/or postgres (a throw-away server; repeat the option).")
    ] = ["sqlite"],  # noqa: B006
    db: Annotated[
        str | None, typer.Option(help="An empty store to use instead (e.g. postgresql://…); overrides --backend.")
    ] = None,
) -> None:
    """kill -9 of the controller at random moments; invariants checked after each (JSON out)."""
    from rich.progress import Progress

    from disagg.control.commands import _fail
    from disagg.store.pgtemp import TempPostgres

    for name in backend:
        if name not in ("sqlite", "postgres"):
            raise _fail(f"--backend: {name!r} is not allowed; use sqlite or postgres")
    results = []
    runs: list[str | None] = [None] if db else list(backend)
    for b in runs:
        pg: TempPostgres | None = None
        with tempfile.TemporaryDirectory(prefix="disagg-crash-") as d, Progress(auto_refresh=False,
                                                                                transient=True) as progress:
            task = progress.add_task(f"kill -9 trials ({b or 'given store'})", total=trials)

            def advance(_trial: int, task: Any = task) -> None:
                progress.advance(task)
                progress.refresh()

            try:
                url = db
                if b == "postgres":
                    pg = TempPostgres().start()
                    url = pg.create_database("crash")
                results.append(run_crash_trials(Path(d), trials, seed, scale, advance, db=url))
            finally:
                if pg is not None:
                    pg.stop()
    sys.stdout.write(json.dumps(results if len(results) > 1 else results[0], indent=2) + "\n")
    if any(r["violations"] for r in results):
        raise typer.Exit(1)
