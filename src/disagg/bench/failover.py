"""`disagg bench failover`: replicas of one controller on PostgreSQL; the leader dies or is paused.

Two or three real `disagg serve` replicas share a throw-away PostgreSQL store and one state directory
(the local engine: replicas on one host). A client submits a steady stream of short jobs, each to a
live replica (any replica takes submissions), retrying with its Idempotency-Key until one answers
201. At random moments the leader, in turn, is
  - killed (SIGKILL to its process group: the API and the loop process at once);
  - stopped (SIGSTOP) for longer than the lease, then resumed (SIGCONT): by then another replica
    leads, so the old leader's next write is fenced and it must step down (it exits; here, as under a
    supervisor, it is started again as a standby);
  - terminated (SIGTERM, what `systemctl stop` sends: a rolling restart): it must exit 0 having given up
    the lease, so that a standby takes over at its next look, not after the lease lapses.
Takeover time: from the kill (the stop, the SIGTERM) to the moment the new leader committed its first round
(`first_round_at` of the lease, the database's clock, on the same host as this process's clock).

At the end every accepted job must have completed exactly once (the tasks log their start and end),
no device may stay attached without a live slice, and no transition may have been written under an
old epoch after a newer one (`Store.stale_writes`: fenced writes accepted, must be 0).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from disagg.bench.crash import (
    ForkedServer,
    Serve,
    admin_headers,
    event_violations,
    forget_jobs_dir,
    invariant_violations,
    quiet_tempdir,
    shared_file,
)
from disagg.model.states import DeviceState, JobState

_ENDED = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
#: The leader's failures, in turn.
_HOW = ("kill", "stop", "term")


class Replica(ForkedServer):
    """One `disagg serve` replica (its own port and name, the shared state directory), started as a new
    program, not forked: this process has threads (the client), and a child forked while one of them
    holds a lock (logging's, a stream's) inherits it held and can hang before it serves."""

    def __init__(self, root: Path, db: str, name: str, options: list[str], serve: Serve) -> None:
        super().__init__(root, db, ["--replica-name", name, *options], serve)
        self.name = name
        self.exit_code: int | None = None  # how the last run ended (-N: killed by signal N)

    def start(self) -> None:
        import subprocess
        import sys

        argv = [sys.executable, "-m", "disagg.cli", "serve", "--db", self.db, "--port", str(self.port),
                "--state-dir", str(self.root / "state"), *self.options]
        # a benchmark's throw-away controller: its jobs' directories may share the disk of its store
        env = {"DISAGG_ALLOW_JOBS_ON_STORE_DISK": "true", **os.environ}
        with open(self.root / "server.log", "ab") as log:
            # the Popen is kept, so that nothing reaps the child behind waitpid's back
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True, env=env)
        self.pid = self.proc.pid

    def alive(self) -> bool:
        if not self.pid:
            return False
        try:
            done, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped already
            done, status = self.pid, -1
        if done:
            self.pid = 0
            self.exit_code = os.waitstatus_to_exitcode(status) if status >= 0 else None
        return bool(self.pid)

    def kill(self) -> None:
        super().kill()
        self.pid = 0

    def wait_exit(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.alive():
                return True
            time.sleep(0.02)
        return False


class Client:
    """Submits a short job every `every_s` to a live replica; keeps each until some replica answers 201."""

    def __init__(self, replicas: list[Replica], headers: dict[str, str], events: Path, rng: random.Random,
                 every_s: float = 0.15) -> None:
        self.replicas, self.headers, self.events, self.rng, self.every_s = replicas, headers, events, rng, every_s
        self.accepted: dict[str, str] = {}
        self.refused: dict[int, str] = {}  # answers other than 201, by status: the last of each
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="failover-client", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _submit(self, key: str, body: dict[str, Any]) -> None:
        while True:
            for r in self.rng.sample(self.replicas, len(self.replicas)):
                with contextlib.suppress(httpx.HTTPError):
                    answer = httpx.post(r.url + "/v1/jobs", json=body, timeout=3,
                                        headers={**self.headers, "Idempotency-Key": key})
                    if answer.status_code == 201:
                        self.accepted[key] = answer.json()["id"]
                        return
                    self.refused[answer.status_code] = answer.text[:300]
            time.sleep(0.05)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            self._submit(uuid.uuid4().hex, _short_job(self.rng, self.events, i))
            self.stop.wait(self.every_s)

    def join(self) -> None:
        self.stop.set()
        self._thread.join(timeout=60)


def _short_job(rng: random.Random, events: Path, i: int) -> dict[str, Any]:
    cmd = (f"echo start $DISAGG_JOB $DISAGG_SLICE $DISAGG_TASK_INDEX $(date +%s.%N) >> {events}; "
           f"sleep {rng.choice([0.05, 0.2])}; "
           f"echo end $DISAGG_JOB $DISAGG_SLICE $DISAGG_TASK_INDEX $(date +%s.%N) >> {events}")
    return {"name": f"failover-{i}", "image": "rodinia/nw", "command": ["sh", "-c", cmd], "max_retries": 10,
            "tasks": {"count": rng.choice([1, 1, 2]), "cpus": 1.0, "memory_gb": 1.0, "gpu": rng.choice([0, 1])}}


def _view(r: Replica, headers: dict[str, str]) -> dict[str, Any] | None:
    try:
        answer = httpx.get(r.url + "/v1/controller", headers=headers, timeout=2)
    except httpx.HTTPError:
        return None
    return answer.json() if answer.status_code == 200 else None


def _leader(replicas: list[Replica], headers: dict[str, str], timeout: float = 30.0) -> tuple[Replica, int]:
    """The replica that leads now and its epoch (waiting for one that has committed a round)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for r in replicas:
            view = _view(r, headers) if r.alive() else None
            if view and view["role"] == "leader" and (view.get("lease") or {}).get("first_round_at"):
                return r, int(view["epoch"])
        time.sleep(0.05)
    raise RuntimeError("no replica leads")


def _takeover(replicas: list[Replica], headers: dict[str, str], old_epoch: int, since: float,
              timeout: float = 60.0) -> tuple[float, int]:
    """Wait until a newer epoch committed its first round; (seconds from `since`, the new epoch)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for r in replicas:
            view = _view(r, headers) if r.alive() else None
            lease = (view or {}).get("lease") or {}
            if view and int(view["epoch"]) > old_epoch and lease.get("first_round_at"):
                return float(lease["first_round_at"]) - since, int(view["epoch"])
        time.sleep(0.02)
    seen = {r.name: (_view(r, headers) or {}).get("lease") if r.alive() else "not running" for r in replicas}
    raise RuntimeError(f"no takeover within {timeout:.0f} s (the survivors saw: {seen})")


def _trial(replicas: list[Replica], headers: dict[str, str], rng: random.Random, how: str,
           lease_s: float) -> dict[str, Any]:
    """One failure of the leader and the takeover after it; the old leader is started again as a standby."""
    restarted = [r.name for r in replicas if not r.alive()]
    for r in replicas:  # as a supervisor would: a replica that stepped down on its own (overload) comes back
        if not r.alive():
            r.start()
            r.ready(90.0)
    leader, epoch = _leader(replicas, headers)
    time.sleep(rng.uniform(0.0, 1.0))  # a random moment in the leader's renewal period
    since = time.time()
    if how == "kill":
        leader.kill()
    elif how == "term":
        os.kill(leader.pid, signal.SIGTERM)
    else:
        os.killpg(leader.pid, signal.SIGSTOP)
    took, new_epoch = _takeover([r for r in replicas if r is not leader], headers, epoch, since)
    stepped_down = exit_code = None
    if how == "term":
        exit_code = leader.exit_code if leader.wait_exit(30.0) else "still running"
        if exit_code == "still running":
            leader.kill()
    if how == "stop":
        time.sleep(max(0.0, since + lease_s + 0.5 - time.time()))  # paused longer than the lease
        os.killpg(leader.pid, signal.SIGCONT)
        stepped_down = leader.wait_exit(30.0)  # fenced: it must step down (exit) on its own
        if not stepped_down:
            leader.kill()
    leader.start()
    leader.ready(90.0)
    return {"how": how, "takeover_s": round(took, 3), "from_epoch": epoch, "to_epoch": new_epoch,
            "old_leader": leader.name, "stepped_down": stepped_down, "exit_code": exit_code,
            "restarted_before": restarted}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] if ordered else 0.0


def _wait_done(replicas: list[Replica], headers: dict[str, str], ids: set[str], timeout: float,
               reasons: dict[str, str]) -> dict[str, str]:
    """Wait until every accepted job has ended; the states of those jobs as the store has them (and in
    `reasons`, why each failed one failed)."""
    end = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < end:
        for r in [r for r in replicas if r.alive()]:  # any replica that answers
            reasons.clear()
            states = {}
            nxt: str | None = "/v1/jobs?limit=500"
            try:
                while nxt:
                    page = httpx.get(r.url + nxt, headers=headers, timeout=5).json()
                    states.update({j["id"]: j["state"] for j in page["jobs"]})
                    reasons.update({j["id"]: str(j.get("reason")) for j in page["jobs"]
                                    if j["state"] == JobState.FAILED})
                    nxt = page.get("next")
            except httpx.HTTPError:
                continue
            if all(states.get(i) in _ENDED for i in ids):
                return states
            break
        time.sleep(0.3)
    return states


def _run_trials(root: Path, group: list[Replica], headers: dict[str, str], rng: random.Random, trials: int,
                lease_s: float, results: list[dict[str, Any]], violations: list[str], on_trial: Any
                ) -> tuple[dict[str, str], dict[str, str], set[str], list[str], dict[str, int]]:
    """Start the replicas and the client, fail the leader `trials` times, wait for the jobs to end and stop
    the replicas: (states, why the failed ones failed, the accepted jobs, run violations, runs per job)."""
    with quiet_tempdir("disagg-failover-events-") as shared:
        events = shared_file(shared / "events")  # before the replicas start: their jobs' sandboxes bind it
        for r in group:
            r.start()
        for r in group:
            r.ready(90.0)
        client = Client(group, headers, events, rng)
        client.start()
        try:
            for t in range(trials):
                try:
                    results.append(_trial(group, headers, rng, _HOW[t % len(_HOW)], lease_s))
                except RuntimeError as exc:  # no takeover, a replica that does not come back: say it, stop
                    violations.append(f"trial {t}: {exc}; the replicas' log: {root / 'server.log'}")
                    break
                if on_trial is not None:
                    on_trial(t)
        finally:
            client.join()
        ids = set(client.accepted.values())
        violations += [f"submissions answered {code}: {text}" for code, text in client.refused.items() if code < 500]
        reasons: dict[str, str] = {}
        states = _wait_done(group, headers, ids, 180.0, reasons)
        for r in group:
            if r.alive():
                r.kill()
        bad_events, runs = event_violations(events, {i for i in ids if states.get(i) == JobState.COMPLETED})
    return states, reasons, ids, bad_events, runs


def run_failover_trials(root: Path, serve: Serve, db: str, trials: int = 50, replicas: int = 2, seed: int = 7,
                        scale: float = 0.01, lease_s: float = 3.0, on_trial: Any = None) -> dict[str, Any]:
    """`trials` leader failures (kill -9, SIGSTOP and SIGTERM in turn, at random moments) among `replicas`
    replicas on the PostgreSQL store `db` (empty); what was measured and found."""
    from disagg.control.config import load_config
    from disagg.control.service import open_service
    from disagg.store import Store

    t0 = time.perf_counter()
    rng = random.Random(seed)
    headers, _ = admin_headers(db)
    same_user = ["--allow-same-user"] if os.geteuid() != 0 else []
    # the jobs' directories apart from /var/lib/disagg/jobs (a test session on the same machine cleans it)
    jobs_dir = Path(tempfile.mkdtemp(prefix="disagg-failover-jobs-"))
    jobs_dir.chmod(0o755)
    options = ["--latency-scale", str(scale), "--tick-s", "0.02", "--round-gap-s", "0.02", *same_user]
    saved = {k: os.environ.get(k) for k in ("DISAGG_LEASE_S", "DISAGG_JOBS_DIR")}
    # the replicas (forked) read them
    os.environ.update({"DISAGG_LEASE_S": str(lease_s), "DISAGG_JOBS_DIR": str(jobs_dir / "jobs")})
    group = [Replica(root, db, f"r{i}", options, serve) for i in range(replicas)]
    results: list[dict[str, Any]] = []
    violations: list[str] = []
    try:
        states, reasons, ids, bad_events, runs = _run_trials(root, group, headers, rng, trials, lease_s, results,
                                                             violations, on_trial)
        settings = load_config(None, os.environ, db=db, state_dir=str(root / "state"), latency_scale=scale,
                               allow_same_user=True if same_user else None, replica_name="bench-check",
                               allow_jobs_on_store_disk=True)
        svc = open_service(settings)  # waits for the last leader's lease to lapse, reconciles, then looks
        try:
            found = invariant_violations(svc, set(), final=False)
        finally:
            svc.close()
    finally:
        for r in group:
            if r.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(r.pid, signal.SIGCONT)
                r.kill()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(jobs_dir, ignore_errors=True)
    leaked = [v for v in found if DeviceState.ATTACHED in v or "held by gone" in v]
    violations += found
    store = Store(db)
    try:
        lease = store.lease()
        stale = store.stale_writes()
    finally:
        store.close()
    completed = sum(1 for i in ids if states.get(i) == JobState.COMPLETED)
    twice = [b for b in bad_events if "twice" in b]
    violations += bad_events + [f"job {i} ended {states.get(i)}: {reasons.get(i, '')}" for i in ids
                                   if states.get(i) != JobState.COMPLETED]
    times = [r["takeover_s"] for r in results]
    stops = [r for r in results if r["how"] == "stop"]
    violations += _trial_violations(results)
    if stale:
        violations.append(f"{stale} fenced writes were accepted")
    return {
        "benchmark": "failover", "replicas": replicas, "trials": trials, "seed": seed, "scale": scale,
        "lease_s": lease_s, "takeovers": len(results),
        "takeover_s": {"p50": _percentile(times, 0.5), "p99": _percentile(times, 0.99), "max": max(times, default=0.0),
                       "kill_max": max((r["takeover_s"] for r in results if r["how"] == "kill"), default=0.0),
                       "stop_max": max((r["takeover_s"] for r in stops), default=0.0),
                       "term_max": max((r["takeover_s"] for r in results if r["how"] == "term"), default=0.0)},
        "jobs": {"accepted": len(ids), str(JobState.COMPLETED): completed,
                 "lost": sum(1 for i in ids if states.get(i) not in _ENDED),
                 str(JobState.FAILED): sum(1 for i in ids if states.get(i) == JobState.FAILED),
                 "run_twice": len(twice), "runs_per_job_max": max(runs.values(), default=0)},
        "devices_leaked": len(leaked),
        "fenced_writes": {"refused": lease.fenced_writes if lease else 0, "accepted": stale,
                          "stopped_leaders_stepped_down": sum(1 for r in stops if r["stepped_down"])},
        "failovers": lease.failovers if lease else 0,
        "trials_detail": results,
        "violations": violations, "seconds": round(time.perf_counter() - t0, 1),
    }


def _trial_violations(results: list[dict[str, Any]]) -> list[str]:
    """A paused leader that did not step down; a leader stopped with SIGTERM that did not exit 0."""
    return ([f"trial {i}: the paused leader did not step down" for i, r in enumerate(results)
             if r["how"] == "stop" and not r["stepped_down"]]
            + [f"trial {i}: the leader stopped with SIGTERM ended {r['exit_code']}, not 0"
               for i, r in enumerate(results) if r["how"] == "term" and r["exit_code"] != 0])


def run_failover_bench(serve: Serve, trials: int = 50, replicas: int = 2, seed: int = 7, scale: float = 0.01,
                       on_trial: Any = None) -> dict[str, Any]:
    """`run_failover_trials` on a throw-away PostgreSQL server, in a temporary directory."""
    from disagg.store.pgtemp import TempPostgres

    with quiet_tempdir("disagg-failover-") as d, TempPostgres() as pg:
        try:
            result = run_failover_trials(d, serve, pg.create_database("failover"), trials, replicas, seed,
                                         scale, on_trial=on_trial)
            if result["violations"]:  # keep the replicas' log, which goes with the directory
                kept = Path(tempfile.mkstemp(prefix="disagg-failover-", suffix=".log")[1])
                shutil.copyfile(d / "server.log", kept)
                result["log"] = str(kept)
            return result
        finally:
            forget_jobs_dir(d / "state")


__all__ = ["run_failover_bench", "run_failover_trials"]
