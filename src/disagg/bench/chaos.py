"""`disagg bench chaos`: a seeded chaos soak against a real `disagg serve`, then its invariants as JSON.

A real controller (`ForkedServer`, as `disagg bench crash` starts it: a forked `disagg serve` on an
SQLite store in a temporary directory, the emulated testbed sped up by `latency_scale`) gets tenants
with quotas and borrowing (`chaos_plan.TENANT_KINDS`). For `seconds`, the actions that
`chaos_plan.make_schedule` drew from the seed run at their offsets: the tenants submit short jobs
(CPU only, GPUs, NVMe, gangs; now and then one above the tenant's limit; three in ten with an SLO, one
in three of those an SLO of a second that no placement meets), devices and links fail and
are repaired through the admin API, the controller is killed with SIGKILL and restarted on the same
store and state directory, and composing jobs are cancelled. Twice a second the soak samples the
queue, the devices, the links and the tenants. Then everything is repaired and the queue drains
(at most `drain_s`), the server is killed and the store and the fabric are read as they were left.
As root, the tenants' jobs run as `nobody` with their working directories under the soak's own
directory (`_config_file` says why).

Invariants (each violation names its invariant and what was seen):
  - ended:        every accepted job completed, or was cancelled by the soak, or failed because its
                  retries ran out; none is still waiting once the queue drained; over-limit jobs are
                  refused (422), not accepted to wait for ever;
  - lost:         every job answered 201 is in the store;
  - ran-twice:    no job whose command ran to its end (every task's end marker in one slice) started
                  again, during that run or after it, and every completed job ran (the tasks' markers,
                  `chaos_plan.rerun_violations`; a run cut short by a fault may start again);
  - leaked:       no device attached on the fabric or held in the store without a live slice; none live
                  at the end;
  - reservation:  a reason that names a reservation names a waiting job not blocked by its own quota;
  - wait:         no queued job waits more than `max_wait_rounds` rounds (and `min_wait_s`) while devices
                  and room it fits, within its tenant's own quota, are free and reachable at every sample
                  (jobs younger than a job that starves for the cluster's sake are left out: its
                  reservation may rightly hold what is free);
  - healthz:      while a job is stuck so, `/healthz` says `degraded`;
  - drains:       the queue drains within `drain_s`. When it does not but jobs still end (some ended in
                  the drain's last `MOVING_S`), the cluster serves slower than the soak submits: that is
                  this one violation, and the jobs and slices still live are not called stuck or leaked
                  (`ended` and `leaked` judge them only after a drain, or a drain that stopped moving).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml

from disagg.bench.chaos_plan import (
    Action,
    ChaosOptions,
    Free,
    above,
    ask,
    fits,
    limits,
    make_schedule,
    rerun_violations,
    tenant_specs,
)
from disagg.bench.crash import (
    ForkedServer,
    Serve,
    device_leaks,
    every_item,
    forget_jobs_dir,
    quiet_tempdir,
    shared_file,
)
from disagg.model.states import DeviceState, JobReason, JobState, LinkState

if TYPE_CHECKING:
    from disagg.store import Store

#: Called with (seconds done, seconds in all, phase) as the soak goes.
Progress = Callable[[float, float, str], None]
#: Seconds between two samples of the queue and what is free.
SAMPLE_S = 0.5
#: A reason that names a reservation: "… the resources reserved for <job> were held …".
_RESERVED = re.compile(r"reserved for (\S+?)[\s)]")
#: The controller's `starvation_rounds` in a soak: W from which a waiting job's reservation holds.
STARVATION_ROUNDS = 30
#: As root, the Unix user every tenant's jobs run as (one that no other session removes).
SHARED_USER = "nobody"
_ENDED = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
#: Seconds at the end of a drain that ran out in which a job that ended says the queue was still moving.
MOVING_S = 30.0


@dataclass(frozen=True)
class DrainEnd:
    """How the drain ended: `settled` (nothing live, or what waits fit nothing for 5 s) or out of time
    after `seconds`, with `live` jobs not ended and `ended_recently` of them ended in its last `MOVING_S`."""

    settled: bool
    seconds: float
    live: int
    ended_recently: int

    @property
    def moving(self) -> bool:
        """Out of time while jobs still ended: the soak submitted faster than the cluster serves, which
        says nothing yet of the jobs still live."""
        return not self.settled and self.ended_recently > 0

    def as_dict(self) -> dict[str, Any]:
        return {"settled": self.settled, "seconds": round(self.seconds, 1), "live_at_end": self.live,
                f"ended_in_last_{MOVING_S:g}_s": self.ended_recently}


def ended_since(history: list[tuple[float, int]], now: float, window: float = MOVING_S) -> int:
    """How many jobs ended in the `window` seconds before `now`, from (time, jobs ended by then) samples
    in time order (the drain's polls): the last count less the one of the first sample in the window (the
    first sample of all when the drain is shorter)."""
    if not history:
        return 0
    start = next((n for t, n in history if t >= now - window), history[-1][1])
    return history[-1][1] - start


def unended_detail(drain: DrainEnd) -> str | None:
    """What a job still live at the end is said to show, by how the drain ended; None when the drain ran
    out while jobs still ended (`DrainEnd.moving`: the one `drains` violation says it)."""
    if drain.settled:
        return "the queue drained and it did not end"
    if drain.moving:
        return None
    return f"the drain ran out after {drain.seconds:g} s and no job ended in its last {MOVING_S:g} s"


@dataclass
class _Watch:
    """What the samples found: the streak of each job that fits what is free, the longest, the stuck."""

    streaks: dict[str, tuple[float, int]] = field(default_factory=dict)
    longest: dict[str, Any] = field(default_factory=lambda: {"rounds": 0, "seconds": 0.0, "job": None})
    stuck: set[str] = field(default_factory=set)
    samples: int = 0


@dataclass
class _Soak:
    """One soak: the server, the tokens, what was submitted and found."""

    opts: ChaosOptions
    server: ForkedServer
    store: Store
    headers: dict[str, str]
    tokens: dict[str, str]
    quotas: dict[str, dict[str, float]]
    limits: dict[str, dict[str, float]]
    accepted: dict[str, str] = field(default_factory=dict)
    jobs: dict[str, Action] = field(default_factory=dict)
    pending: list[Action] = field(default_factory=list)
    cancelled: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)
    watch: _Watch = field(default_factory=_Watch)
    violations: list[dict[str, str]] = field(default_factory=list)

    # --- talking to the server ------------------------------------------------------------------
    def get(self, path: str) -> Any:
        r = httpx.get(self.server.url + path, headers=self.headers, timeout=10)
        r.raise_for_status()
        return r.json()

    def post(self, path: str) -> None:
        httpx.post(self.server.url + path, headers=self.headers, timeout=10).raise_for_status()

    def bad(self, invariant: str, detail: str) -> None:
        self.violations.append({"invariant": invariant, "detail": detail})

    def submit(self, action: Action) -> None:
        """Submit as its tenant with its key; kept pending (retried with the same key) until answered."""
        r = httpx.post(self.server.url + "/v1/jobs", json=dict(action.body or {}), timeout=10,
                       headers={"Authorization": f"Bearer {self.tokens[action.target]}",
                                "Idempotency-Key": action.key})
        if r.status_code == 201 or r.status_code == 200:
            job_id = str(r.json()["id"])
            self.accepted[action.key] = job_id
            self.jobs[job_id] = action
            if action.over_limit:
                tasks = dict(dict(action.body or {})["tasks"])
                self.bad("ended", f"job {job_id} of {action.target} asks {_shape(tasks)}, "
                                  f"above its limit {self.limits[action.target]}, and was accepted (201), not "
                                  "refused (422)")
        elif r.status_code == 422 and action.over_limit:
            self.counts["refused_over_limit"] += 1
        else:
            self.bad("ended", f"submission {action.key} of {action.target} answered {r.status_code}: {r.text[:300]}")

    def act(self, action: Action) -> None:
        """Do one action of the schedule (a submission is queued to `pending` first)."""
        if action.kind == "submit":
            self.counts["submitted"] += 1
            self.pending.append(action)
            self.flush()
        elif action.kind == "kill":
            self.restart()
        elif action.kind == "cancel":
            self.cancel(action.pick)
        else:
            what, kind = action.kind.split("-")
            self.post(f"/v1/{kind}s/{action.target}/{what}")
            if what == "fail":
                self.counts[f"{kind}_faults"] += 1

    def flush(self) -> None:
        while self.pending:
            self.submit(self.pending[0])
            self.pending.pop(0)

    def restart(self) -> None:
        """kill -9 of the whole server (API and loop), then start it again on the same store and state."""
        self.server.kill()
        self.counts["restarts"] += 1
        self.server.start()
        self.server.ready(timeout=60)

    def cancel(self, pick: float) -> None:
        """Cancel a composing job (`pick` chooses which); none composing: the newest accepted job."""
        composing = sorted(j["id"] for j in every_item(self.server.url, "/v1/jobs?state=composing&limit=500", "jobs",
                                                       self.headers))
        ids = list(self.jobs)
        target = composing[int(pick * len(composing))] if composing else (ids[-1] if ids else None)
        if target is None:
            return
        r = httpx.post(f"{self.server.url}/v1/jobs/{target}/cancel", headers=self.headers, timeout=10)
        if r.status_code in (200, 202) and target not in self.cancelled:
            self.cancelled.add(target)
            self.counts["cancels"] += 1
            self.counts["cancels_mid_compose"] += bool(composing)

    # --- sampling ---------------------------------------------------------------------------------
    def free(self) -> Free:
        """What is free and reachable now: devices and links from the API, room from the store's snapshot."""
        devices = every_item(self.server.url, "/v1/devices?limit=500", "devices", self.headers)
        down = {lk["id"] for lk in every_item(self.server.url, "/v1/links?limit=500", "links", self.headers)
                if lk["state"] != LinkState.UP}
        # one word per device: `free` is neither attached, drained, failed nor cut off by a down link
        count: Counter[str] = Counter(d["kind"] for d in devices if d["state"] == DeviceState.FREE)
        snapshot = self.store.cluster()
        room = {m.name: [m.cpus, m.memory_gb] for m in snapshot.machines}
        for a in snapshot.allocations:
            if a.machine in room:
                room[a.machine][0] -= a.cpus
                room[a.machine][1] -= a.memory_gb
        usage = {t["name"]: t["usage"] for t in self.get("/v1/tenants")["tenants"]}
        return Free(dict(count), {m: (c, g) for m, (c, g) in room.items()},
                    frozenset(m for m in room if f"up:{m}" not in down), self.quotas, usage)

    def sample(self) -> None:
        """One look at the queue: streaks of jobs that fit what is free, reservations' heads, /healthz."""
        queued = {j["id"]: j for j in every_item(self.server.url, "/v1/jobs?state=queued&limit=500", "jobs",
                                                  self.headers)}
        free = self.free()
        now = time.monotonic()
        w = self.watch
        w.samples += 1
        for gone in set(w.streaks) - set(queued):
            del w.streaks[gone]
        behind = _starving_since(queued.values(), free)
        for job_id, job in queued.items():
            self._check_reservation(job, queued)
            if not fits(job, free) or float(job["submitted_at"]) > behind:
                w.streaks.pop(job_id, None)  # it does not fit, or a starving job's reservation may hold it back
                continue
            t0, r0 = w.streaks.setdefault(job_id, (now, int(job["wait_rounds"])))
            self._waited(job, max(0, int(job["wait_rounds"]) - r0), now - t0)

    def _waited(self, job: dict[str, Any], rounds: int, seconds: float) -> None:
        """A job fitting what is free has waited `rounds` and `seconds` so: the longest, and whether it is stuck."""
        w, job_id = self.watch, job["id"]
        if rounds > w.longest["rounds"]:
            w.longest = {"rounds": rounds, "seconds": round(seconds, 2), "job": job_id, "reason": job["reason"]}
        if rounds > self.opts.max_wait_rounds and seconds >= self.opts.min_wait_s and job_id not in w.stuck:
            w.stuck.add(job_id)
            self.bad("wait", f"job {job_id} ({job['tenant']}, {_shape(job['tasks'])}) waited {rounds} rounds "
                             f"({seconds:.1f} s) while what it fits was free and reachable: {job['reason']!r}")
            health = self.get("/healthz")
            if health["status"] != "degraded":
                self.bad("healthz", f"/healthz said {health['status']!r} while job {job_id} was stuck")

    def _check_reservation(self, job: dict[str, Any], queued: dict[str, dict[str, Any]]) -> None:
        found = _RESERVED.search(str(job.get("reason") or "") + " ")
        if found is None:
            return
        head = queued.get(found.group(1))
        if head is not None and head.get("reason_code") == "quota":
            self.bad("reservation", f"job {job['id']} waits behind a reservation for {head['id']}, which waits for "
                                    f"its own tenant's quota: {head['reason']!r}")


def _starving_since(queued: Iterable[dict[str, Any]], free: Free) -> float:
    """When the oldest job that starves for the cluster's sake was submitted (inf: none): a job waiting
    `STARVATION_ROUNDS` or more, not for its own quota, that does not fit what is free. Its reservation
    may rightly hold free resources against younger jobs, so the wait check leaves those out."""
    heads = [float(j["submitted_at"]) for j in queued if int(j["wait_rounds"]) >= STARVATION_ROUNDS
             and j.get("reason_code") != "quota" and not fits(j, free)]
    return min(heads, default=math.inf)


def _shape(tasks: dict[str, Any]) -> str:
    """A job's tasks in short: `2x(cpus 1, gpu 1)`."""
    each = ", ".join(f"{k} {v:g}" for k, v in tasks.items() if k != "count" and isinstance(v, int | float) and v)
    return f"{tasks.get('count', 1)}x({each})"


def _every_second(soak: _Soak, until: float, progress: Progress | None, t0: float, total: float, phase: str) -> None:
    """Sample until `until` (monotonic), reporting progress."""
    next_sample = time.monotonic()
    while time.monotonic() < until:
        if time.monotonic() >= next_sample:
            with contextlib.suppress(httpx.HTTPError):
                soak.sample()
            next_sample = time.monotonic() + SAMPLE_S
            if progress is not None:
                progress(min(time.monotonic() - t0, total), total, phase)
        time.sleep(min(0.05, max(0.0, until - time.monotonic())))


def _fault_phase(soak: _Soak, schedule: list[Action], progress: Progress | None) -> None:
    """Run the schedule at its offsets, sampling in between. An action the server could not take
    (it was down) is retried once it is back; a submission stays pending until answered."""
    t0 = time.monotonic()
    for action in schedule:
        _every_second(soak, t0 + action.at, progress, t0, soak.opts.seconds, "faults")
        for attempt in range(3):
            try:
                soak.act(action)
                break
            except httpx.HTTPError as exc:
                if attempt == 2:
                    soak.counts["actions_not_taken"] += 1
                    if action.kind == "submit":
                        soak.bad("ended", f"submission {action.key} failed three times: {exc}")
                time.sleep(0.5)
    _every_second(soak, t0 + soak.opts.seconds, progress, t0, soak.opts.seconds, "faults")


def _drain(soak: _Soak, schedule: list[Action], progress: Progress | None
           ) -> tuple[list[dict[str, Any]], DrainEnd]:
    """Repair everything, then let the queue drain: until no job is live and what waits fits nothing
    for 5 s, or `drain_s`. Returns every job as the API shows it then, and how the drain ended."""
    for action in schedule:
        if action.kind.startswith("fail-"):
            kind = action.kind.split("-")[1]
            soak.post(f"/v1/{kind}s/{action.target}/repair")
    soak.flush()
    t0 = time.monotonic()
    quiet_since: float | None = None
    history: list[tuple[float, int]] = []
    while time.monotonic() - t0 < soak.opts.drain_s:
        _every_second(soak, time.monotonic() + 1.0, progress, t0, soak.opts.drain_s, "drain")
        jobs = every_item(soak.server.url, "/v1/jobs?limit=500", "jobs", soak.headers)
        live = [j for j in jobs if j["state"] not in _ENDED]
        history.append((time.monotonic(), len(jobs) - len(live)))
        slices = every_item(soak.server.url, "/v1/slices?state=tearing-down&limit=500", "slices", soak.headers)
        settled = not slices and all(j["state"] == JobState.QUEUED and j["id"] not in soak.watch.streaks for j in live)
        quiet_since = (quiet_since or time.monotonic()) if settled else None
        if (not live and not slices) or (quiet_since is not None and time.monotonic() - quiet_since > 5.0):
            return jobs, DrainEnd(True, time.monotonic() - t0, len(live), 0)
    jobs = every_item(soak.server.url, "/v1/jobs?limit=500", "jobs", soak.headers)
    live = [j for j in jobs if j["state"] not in _ENDED]
    now = time.monotonic()
    history.append((now, len(jobs) - len(live)))
    drain = DrainEnd(False, now - t0, len(live), ended_since(history, now))
    if drain.moving:
        soak.bad("drains", f"the queue did not drain in {soak.opts.drain_s:g} s: {drain.live} jobs still live, "
                            f"{drain.ended_recently} ended in its last {MOVING_S:g} s (the cluster serves slower "
                            "than the soak submits); whether those end is not judged: raise --drain-s or lower --rate")
    return jobs, drain


def _check_ends(soak: _Soak, jobs: list[dict[str, Any]], drain: DrainEnd) -> dict[str, int]:
    """Every accepted job ended as expected; none lost. The jobs per final state."""
    by_id = {j["id"]: j for j in jobs}
    stored = {j.id for j in soak.store.job_summaries()}
    for job_id in sorted(set(soak.accepted.values()) - stored):
        soak.bad("lost", f"job {job_id} was accepted (201) and is not in the store")
    states: Counter[str] = Counter()
    for job_id in soak.accepted.values():
        job = by_id.get(job_id)
        if job is None:
            continue
        states[job["state"]] += 1
        state, why = job["state"], f"{job['reason']!r} ({job.get('reason_code')})"
        if state == JobState.CANCELLED and job_id not in soak.cancelled:
            soak.bad("ended", f"job {job_id} was cancelled, and the soak did not cancel it: {why}")
        elif state == JobState.FAILED and job.get("reason_code") != JobReason.RETRIES_EXHAUSTED:
            soak.bad("ended", f"job {job_id} failed: {why}")
        elif state not in _ENDED:
            over = above(ask(job["tasks"]), soak.limits.get(job["tenant"], {}))
            detail = f"above its tenant's limit in {', '.join(over)}, accepted to wait for ever" if over else \
                unended_detail(drain)
            if detail is not None:
                soak.bad("ended", f"job {job_id} ({job['tenant']}, {_shape(job['tasks'])}) is still {state}: "
                                  f"{detail}: {why}")
    return dict(states)


def _check_world(soak: _Soak, settings: Any, events: Path, jobs: list[dict[str, Any]], drain: DrainEnd
                 ) -> dict[str, Any]:
    """With the server killed: devices leaked (store and fabric, as left, not reconciled), runs twice.
    Slices still live are leaks only after a drain (or one that stopped moving): `DrainEnd.moving`."""
    from disagg.control.service import DEFAULT_CLUSTER
    from disagg.fabric.emulated import OperationLatencies
    from disagg.fabric.registry import DriverOptions, make_driver
    from disagg.model import load_cluster

    fabric = make_driver(settings.fabric_driver, DriverOptions(load_cluster(DEFAULT_CLUSTER),
                                                               settings.resolved_state_dir(), OperationLatencies()))
    try:
        live = {r.id: r for r in soak.store.live_slices()}
        leaks = device_leaks(soak.store, fabric, live)
    finally:
        fabric.close()
    for leak in leaks:
        soak.bad("leaked", leak)
    for sid, record in ({} if drain.moving else live).items():
        soak.bad("leaked", f"slice {sid} of job {record.job_id} is still {record.state} at the end")
    text = events.read_text() if events.exists() else ""
    completed = [j["id"] for j in jobs if j["state"] == JobState.COMPLETED]
    twice = rerun_violations(text, {j["id"]: int(j["tasks"]["count"]) for j in jobs}, completed)
    for v in twice:
        soak.bad("ran-twice", v)
    ran_twice = {v.split()[1] for v in twice if "never ran" not in v}
    return {"leaked_devices": leaks, "ran_twice": len(ran_twice)}


def _config_file(root: Path, opts: ChaosOptions) -> Path:
    """The controller's settings: the tenants, a W after which the head starves, a short preemption grace.

    As root, the jobs' working directories sit under `root` and every tenant runs as `nobody`: on a
    shared machine, other test sessions remove the `disagg-*` users and `/var/lib/disagg/jobs/*` they
    did not have when they began, and a soak must not lose its users or directories in the middle."""
    import pwd

    tenants = tenant_specs(opts.tenants)
    settings: dict[str, Any] = {"starvation_rounds": STARVATION_ROUNDS, "preempt_grace_s": 2.0, "tick_s": 0.05,
                                "round_gap_s": 0.05}
    if os.geteuid() == 0:
        with contextlib.suppress(KeyError):
            pwd.getpwnam(SHARED_USER)
            tenants = [{**t, "unix_user": SHARED_USER} for t in tenants]
        root.chmod(0o711)
        settings["jobs_dir"] = str(root / "jobs")
    path = root / "chaos.yaml"
    path.write_text(yaml.safe_dump({"tenants": tenants, **settings}))
    return path


def _open(root: Path, opts: ChaosOptions, serve: Serve) -> tuple[_Soak, Any]:
    """A fresh store with an admin token and one token per tenant, and the server (not started)."""
    from disagg.control.config import load_config
    from disagg.store import Store

    db = f"sqlite:///{root / 'disagg.db'}"
    store = Store(db)
    store.migrate()
    specs = tenant_specs(opts.tenants)
    headers = {"Authorization": f"Bearer {store.create_token('admin', admin=True)}"}
    tokens = {str(s["name"]): store.create_token(str(s["name"])) for s in specs}
    same_user = ["--allow-same-user"] if os.geteuid() != 0 else []
    config = _config_file(root, opts)
    server = ForkedServer(root, db, ["--config", str(config), "--latency-scale", str(opts.latency_scale), *same_user],
                          serve)
    settings = load_config(config, os.environ, db=db, state_dir=str(root / "state"))
    soak = _Soak(opts, server, store, headers, tokens, {str(s["name"]): dict(s.get("quota", {})) for s in specs},
                 {str(s["name"]): limits(s) for s in specs})
    return soak, settings


def run_chaos(serve: Serve, opts: ChaosOptions, progress: Progress | None = None) -> dict[str, Any]:
    """One soak (module docstring) in a temporary directory; the figures, the violations and `replay`."""
    from disagg.control.service import DEFAULT_CLUSTER
    from disagg.model import load_cluster

    t_start = time.perf_counter()
    cluster = load_cluster(DEFAULT_CLUSTER)
    with contextlib.ExitStack() as stack:
        root = Path(opts.keep_dir) if opts.keep_dir else stack.enter_context(
            quiet_tempdir("disagg-chaos-"))
        root.mkdir(parents=True, exist_ok=True)
        shared = root / "events.d" if opts.keep_dir else stack.enter_context(
            quiet_tempdir("disagg-chaos-events-"))
        shared.mkdir(exist_ok=True)
        events = shared_file(shared / "events")
        schedule = make_schedule(opts, [dev.id for dev in cluster.devices],
                                 [lk.id for lk in cluster.links if lk.id.startswith("up:")], events)
        soak, settings = _open(root, opts, serve)
        try:
            soak.server.start()
            soak.server.ready(timeout=60)
            _fault_phase(soak, schedule, progress)
            jobs, drain = _drain(soak, schedule, progress)
            soak.server.kill()
            states = _check_ends(soak, jobs, drain)
            world = _check_world(soak, settings, events, jobs, drain)
        finally:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.killpg(soak.server.pid, signal.SIGKILL)
            soak.store.close()
            forget_jobs_dir(root / "state")
    return _result(soak, states, world, drain, time.perf_counter() - t_start)


def _result(soak: _Soak, states: dict[str, int], world: dict[str, Any], drain: DrainEnd, elapsed: float
            ) -> dict[str, Any]:
    c, opts = soak.counts, soak.opts
    invariants = ("ended", "lost", "ran-twice", "leaked", "reservation", "wait", "healthz", "drains")
    failing = {v["invariant"] for v in soak.violations}
    accepted = set(soak.accepted.values())
    return {
        "benchmark": "chaos", "seed": opts.seed, "seconds": opts.seconds, "tenants": opts.tenants, "rate": opts.rate,
        "latency_scale": opts.latency_scale, "max_wait_rounds": opts.max_wait_rounds,
        "jobs": {"submitted": c["submitted"], "accepted": len(accepted), "refused_over_limit": c["refused_over_limit"],
                 "with_slo": sum(1 for a in soak.jobs.values() if a.body and "slo_s" in a.body),
                 **{str(s): states.get(s, 0) for s in _ENDED},
                 "not_ended": sum(n for s, n in states.items() if s not in _ENDED),
                 "lost": sum(1 for v in soak.violations if v["invariant"] == "lost"), "ran_twice": world["ran_twice"]},
        "faults": {"devices": c["device_faults"], "links": c["link_faults"]}, "restarts": c["restarts"],
        "cancels": c["cancels"], "cancels_mid_compose": c["cancels_mid_compose"],
        "actions_not_taken": c["actions_not_taken"], "samples": soak.watch.samples,
        "longest_wait_with_free_resources": soak.watch.longest, "drain": drain.as_dict(),
        "leaked_devices": world["leaked_devices"],
        "invariants": {name: name not in failing for name in invariants},
        "violations": soak.violations, "replay": opts.replay(), "elapsed_s": round(elapsed, 1),
    }


__all__ = ["ChaosOptions", "run_chaos"]
