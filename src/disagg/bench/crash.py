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

The server is started by a `serve(argv)` the caller passes (`disagg.cli.serve.serve_main`): the
benchmarks are library functions returning data, and import nothing from the CLI that prints them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from disagg.control.split import group_gone
from disagg.model.states import LIVE_SLICE_STATES, JobState, RunState

if TYPE_CHECKING:
    from disagg.control.config import Config
    from disagg.control.service import Service
    from disagg.fabric.base import FabricDriver
    from disagg.store import SliceRecord, Store

# The store, SQLAlchemy and the service are imported where they are used: `disagg bench api` and the
# controller's tests import this module, and need none of them to start.

#: Runs `disagg serve` with these options in this process, until it stops (`disagg.cli.serve.serve_main`).
Serve = Callable[[list[str]], object]


class ServerExited(RuntimeError):
    """The server ended by itself before it answered; the message is the end of its log."""

    @property
    def stepped_down(self) -> bool:
        """It gave up its lease, which lapsed while the machine stalled: its own safety, not a fault. A
        supervisor (systemd's `Restart=`) starts it again, and so do the trials."""
        return "stepping down: the lease" in str(self) and "lapsed" in str(self)


class ForkedServer:
    """`disagg serve` in a forked child with its output in `<root>/server.log`; killed with SIGKILL.

    `serve(options)` runs in the child: the CLI passes `disagg.cli.serve.serve_main`.
    """

    def __init__(self, root: Path, db: str, options: list[str], serve: Serve) -> None:
        self.root, self.db, self.options, self.serve = root, db, options, serve
        from disagg.store.pgtemp import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.pid = 0

    def start(self) -> None:
        options = ["--db", self.db, "--port", str(self.port), "--state-dir", str(self.root / "state"), *self.options]
        pid = os.fork()
        if pid == 0:  # the child: become the server, never return into the caller
            try:
                os.setsid()
                fd = os.open(self.root / "server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the caller's may be captured
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                sys.argv = ["disagg", "serve", *options]
                # a benchmark's throw-away controller: its jobs' directories may share the disk of its store
                os.environ.setdefault("DISAGG_ALLOW_JOBS_ON_STORE_DISK", "true")
                self.serve(options)
            finally:
                os._exit(0)
        self.pid = pid

    def ready(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
            if done:
                raise ServerExited((self.root / "server.log").read_text()[-3000:])
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


def marked_command(events: Path, sleep_s: float) -> list[str]:
    """A task that logs its start and end (`start|end job slice task time`) to `events` around a sleep:
    what `event_violations` (and `disagg bench chaos`) read back."""
    cmd = (f"echo start $DISAGG_JOB $DISAGG_SLICE $DISAGG_TASK_INDEX $(date +%s.%N) >> {events}; "
           f"sleep {sleep_s}; "
           f"echo end $DISAGG_JOB $DISAGG_SLICE $DISAGG_TASK_INDEX $(date +%s.%N) >> {events}")
    return ["sh", "-c", cmd]


def job_body(rng: random.Random, events: Path, i: int) -> dict[str, Any]:
    """A job whose tasks log their start and end (job, slice, task, time) to `events`."""
    command = marked_command(events, rng.choice([0.05, 0.2, 0.5]))
    return {"name": f"crash-{i}", "image": "rodinia/nw", "command": command, "max_retries": 10,
            "tasks": {"count": rng.choice([1, 1, 2]), "cpus": 1.0, "memory_gb": 1.0,
                      "gpu": rng.choice([0, 1, 1, 2])}}


def invariant_violations(svc: Service, seen_slices: set[str], final: bool = False) -> list[str]:
    """What is wrong with a reconciled, quiescent world (empty when nothing is)."""
    slices = {r.id: r for r in svc.store.all_slices()}
    jobs = {j.id: j for j in svc.store.job_summaries()}
    live = {sid: r for sid, r in slices.items() if r.state in LIVE_SLICE_STATES}
    bad: list[str] = []
    if not seen_slices <= set(slices):
        bad.append(f"slices lost: {sorted(seen_slices - set(slices))}")
    seen_slices |= set(slices)
    bad += device_leaks(svc.store, svc.fabric, live)
    per_job: dict[str, list[str]] = defaultdict(list)
    for sid, r in live.items():
        per_job[r.job_id or sid].append(sid)
    bad += [f"job {jid} has {len(sids)} live slices" for jid, sids in per_job.items() if len(sids) > 1]
    for jid, j in jobs.items():
        has_slice = j.slice_id in live and live[j.slice_id].job_id == jid
        if j.state.live and not has_slice:
            bad.append(f"job {jid} is {j.state} without its slice")
        if j.state == JobState.QUEUED and jid in per_job:
            bad.append(f"queued job {jid} still has a live slice")
    bad += _runner_violations(svc, live)
    if final:
        if live or svc.fabric.attachments():
            bad.append(f"at the end, {len(live)} slices are live and {len(svc.fabric.attachments())} attached")
        bad += [f"job {j.id} ended {j.state}: {j.reason}" for j in jobs.values() if j.state != JobState.COMPLETED]
    return bad


def device_leaks(store: Store, fabric: FabricDriver, live: Mapping[str, SliceRecord]) -> list[str]:
    """Devices attached on the fabric, or held in the store, without a live slice that holds them."""
    holds = {(d.id, t.machine) for r in live.values() for t, d in r.placement.devices()}
    bad = [f"{a.device} attached to {a.machine} without a slice" for a in fabric.attachments()
           if (a.device, a.machine) not in holds]
    return bad + [f"{d} held by gone slice {sid}" for d, sid in store.held_devices().items() if sid not in live]


def _runner_violations(svc: Service, live: dict[str, SliceRecord]) -> list[str]:
    """Runners without their slice, and jobs that run more than once at the same time."""
    bad: list[str] = []
    running: dict[str, int] = defaultdict(int)
    for h in svc.engine.handles():
        if svc.engine.status(h).state == RunState.RUNNING:
            if h not in live:
                bad.append(f"a runner of slice {h} lives without its slice")
            else:
                running[live[h].job_id or h] += 1
    return bad + [f"job {jid} runs {n} times" for jid, n in running.items() if n > 1]


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


def every_item(url: str, path: str, key: str, headers: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every item of a paged listing of the API at `url` (following `next`)."""
    items: list[dict[str, Any]] = []
    nxt: str | None = path
    while nxt:
        r = httpx.get(url + nxt, headers=dict(headers), timeout=5)
        r.raise_for_status()
        page = r.json()
        items += page[key]
        nxt = page.get("next")
    return items


@dataclass
class _Trials:
    """One run of kill trials against one store: the server, the jobs and what was found so far."""

    server: ForkedServer
    settings: Config
    headers: dict[str, str]
    events: Path
    rng: random.Random
    pending: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    submitted: dict[str, str] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    checks: int = 0
    during_startup: int = 0
    restarted: int = 0  # starts again after the server stepped down on its own (`ServerExited.stepped_down`)

    def ready(self, restarts: int = 2) -> None:
        """Wait for the started server; one that stepped down before it answered is started again, at most
        `restarts` times (a full suite on two cores stalled a restarted controller past its lease once)."""
        for _ in range(restarts):
            try:
                self.server.ready()
                return
            except ServerExited as exc:
                if not exc.stepped_down:
                    raise
                self.restarted += 1
                self.server.start()
        self.server.ready()

    def submit_pending(self) -> None:
        """Submit what is not yet accepted; a job is kept (and retried with its key) until the answer is 201."""
        for key, body in list(self.pending):
            r = httpx.post(self.server.url + "/v1/jobs", json=body, headers={**self.headers, "Idempotency-Key": key},
                           timeout=5)
            if r.status_code != 201:
                raise RuntimeError(f"submission refused: {r.status_code} {r.text}")
            self.submitted[key] = r.json()["id"]
            self.pending.remove((key, body))

    def kill_once(self, trial: int) -> None:
        """Start the server, kill it at a random moment (one in five during start-up), check every other time."""
        self.server.start()
        if self.rng.random() < 0.2:
            self.during_startup += 1
            time.sleep(self.rng.uniform(0.0, 0.6))  # during start-up, migrations, reconciliation
        else:
            self.ready()
            for _ in range(self.rng.randint(1, 2)):
                n = len(self.submitted) + len(self.pending) + 1
                self.pending.append((uuid.uuid4().hex, job_body(self.rng, self.events, n)))
            with contextlib.suppress(httpx.HTTPError):  # retried with the same key after the restart
                self.submit_pending()
            time.sleep(self.rng.uniform(0.0, 0.8))
        self.server.kill()
        if trial % 2 == 0:  # reconcile as a restart would, then look at the world
            self.check(f"after kill {trial + 1}")
            self.checks += 1

    def check(self, when: str, final: bool = False) -> None:
        """Reconcile in this process (the same `open_service` a restart runs) and record what is wrong."""
        from disagg.control.service import open_service

        svc = open_service(self.settings)
        try:
            self.violations += [f"{when}: {v}" for v in invariant_violations(svc, self.seen, final)]
        finally:
            svc.close()

    def every(self, path: str, key: str) -> list[dict[str, Any]]:
        return every_item(self.server.url, path, key, self.headers)

    def finish(self, timeout_s: float = 120.0) -> None:
        """Run undisturbed until every job has completed and no slice tears down, then kill and check."""
        self.server.start()
        self.ready()
        self.submit_pending()
        end = time.monotonic() + timeout_s
        while True:
            jobs = self.every("/v1/jobs?limit=500", "jobs")
            tearing = httpx.get(self.server.url + "/v1/slices?state=tearing-down", headers=self.headers,
                                timeout=5).json()
            if all(j["state"] == JobState.COMPLETED for j in jobs) and not tearing["slices"]:
                break
            if time.monotonic() > end:
                self.violations.append(f"jobs did not finish within {timeout_s:.0f} s after the last kill")
                break
            time.sleep(0.2)
        self.server.kill()
        self.check("at the end", final=True)


def admin_headers(db: str) -> tuple[dict[str, str], str]:
    """Migrate the empty store at `db` and make an admin token: (the request headers, the store's dialect)."""
    from disagg.store import Store

    store = Store(db)
    store.migrate()
    headers = {"Authorization": f"Bearer {store.create_token('admin', admin=True)}"}
    dialect = store.dialect
    store.close()
    return headers, dialect


def forget_jobs_dir(state_dir: Path) -> None:
    """Remove the jobs' working directories of a benchmark's throw-away controller (as root they are
    under /var/lib/disagg/jobs, outside the temporary directory that goes with the benchmark)."""
    import shutil

    from disagg.engines.local import default_jobs_dir

    shutil.rmtree(default_jobs_dir(state_dir.absolute()), ignore_errors=True)


def remove_when_quiet(path: Path, timeout_s: float = 10.0) -> None:
    """Remove a benchmark's throw-away directory once nothing writes into it any more. Its controller
    was killed (-9), but the jobs' runners outlive it by design (they are the jobs' own sessions) and
    write their exit records into the engine's directories under `path` as their jobs end: a removal in
    between failed with "Directory not empty" (seen once in the suite). Retried until it succeeds or
    `timeout_s` passes; then what is left is left, rather than failing the benchmark's result."""
    import shutil

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                shutil.rmtree(path, ignore_errors=True)
                return
            time.sleep(0.1)


@contextlib.contextmanager
def quiet_tempdir(prefix: str) -> Iterator[Path]:
    """A benchmark's throw-away directory, removed by `remove_when_quiet`: the jobs of the servers it
    kills may still be writing into it."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        remove_when_quiet(path)


def shared_file(path: Path) -> Path:
    """A file every job can append to: the jobs run as their tenant's user (not the benchmark's), so the
    file is writable by all (0666) in a directory all may pass (0755), both in /tmp. The directory is also
    one the jobs' sandboxes bind read-write (`job_shared_dirs`, through DISAGG_JOB_SHARED_DIRS for the
    servers this process starts): a job's own /tmp is private."""
    share_with_jobs(path.parent)
    path.parent.chmod(0o755)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o666)
    os.fchmod(fd, 0o666)
    os.close(fd)
    return path


def share_with_jobs(directory: Path) -> None:
    """Add `directory` to the directories the jobs of the servers this process starts may write
    (DISAGG_JOB_SHARED_DIRS, a JSON list, kept with what it held)."""
    import json

    known = [d for d in json.loads(os.environ.get("DISAGG_JOB_SHARED_DIRS") or "[]") if Path(d).is_dir()]
    if str(directory) not in known:  # the benchmarks' earlier temporary directories are gone: not kept
        known.append(str(directory))
    os.environ["DISAGG_JOB_SHARED_DIRS"] = json.dumps(known)


def run_crash_trials(root: Path, serve: Serve, trials: int = 50, seed: int = 5, scale: float = 0.01,
                     on_trial: Any = None, db: str | None = None) -> dict[str, Any]:
    """Kill the controller `trials` times at random moments; return what was checked and found.

    `serve`: runs `disagg serve` in the forked child (`disagg.cli.serve.serve_main`).
    `db`: an empty store to use (a PostgreSQL URL, say); by default an SQLite file under `root`.
    """
    from disagg.control.config import load_config

    t0 = time.perf_counter()
    db = db or f"sqlite:///{root / 'disagg.db'}"
    headers, dialect = admin_headers(db)
    same_user = ["--allow-same-user"] if os.geteuid() != 0 else []  # not root: jobs can only run as this user
    server = ForkedServer(root, db, ["--latency-scale", str(scale), "--tick-s", "0.02", "--round-gap-s", "0.02",
                                     *same_user],
                          serve)
    with quiet_tempdir("disagg-crash-events-") as shared:
        # (the checks' own `open_service` allows what the forked server allows: jobs on the store's disk)
        settings = load_config(None, os.environ, db=db, state_dir=str(root / "state"), latency_scale=scale,
                               allow_same_user=True if same_user else None, allow_jobs_on_store_disk=True)
        run = _Trials(server, settings, headers,
                      shared_file(shared / "events"), random.Random(seed))
        for trial in range(trials):
            run.kill_once(trial)
            if on_trial is not None:
                on_trial(trial)
        run.finish()
        bad_events, runs = event_violations(run.events, set(run.submitted.values()))
    per_job = sorted(runs.values())
    return {"benchmark": "crash", "store": dialect, "trials": trials, "seed": seed, "scale": scale, "kills": trials,
            "kills_during_startup": run.during_startup, "restarted_after_stepping_down": run.restarted,
            "checks": run.checks + 1, "jobs": len(run.submitted),
            "slices": len(run.seen), "runs_per_job": {"min": per_job[0] if per_job else 0,
                                                      "max": per_job[-1] if per_job else 0},
            "violations": run.violations + bad_events, "seconds": round(time.perf_counter() - t0, 1)}


def run_crash_bench(backend: str | None, serve: Serve, trials: int = 200, seed: int = 5, scale: float = 0.01,
                    on_trial: Any = None, db: str | None = None) -> dict[str, Any]:
    """`run_crash_trials` in a temporary directory on a fresh store: `db` when given (backend None), else
    SQLite, or a throw-away PostgreSQL server (backend "postgres") stopped afterwards."""
    from disagg.store.pgtemp import TempPostgres

    pg: TempPostgres | None = None
    with quiet_tempdir("disagg-crash-") as d:
        try:
            url = db
            if backend == "postgres":
                pg = TempPostgres().start()
                url = pg.create_database("crash")
            return run_crash_trials(d, serve, trials, seed, scale, on_trial, db=url)
        finally:
            if pg is not None:
                pg.stop()
            forget_jobs_dir(d / "state")
