"""The simulation loop: arrivals, scheduling rounds, task starts and completions on a simulated cluster.

Who calls what: `simulate(...)` owns a `Kernel` and a `SimCluster`. Every `interval_s` seconds (while
jobs wait) it builds an immutable `Cluster` snapshot — machines, devices with their health, and one
`Allocation` per running task with its devices and its traffic — and hands it with the queue to the
policy, exactly as `disagg place` does. It then applies the `Decisions` to its own state, re-checking
that nothing is over-committed as `placement.commit.over_commit` has it (`SimCluster.fits`: a placement
that would over-commit is refused and counted as a conflict, Nomad's plan re-validation), and raises
`wait_rounds` of every job left waiting (unless the policy declares `reads_wait_rounds = False`, as the
sequential baselines do: W cannot change their decisions). A flow policy reads W off a `placement.base.WaitingQueue`
(`reads_waiting_queue`): W is then counted apart and a job copied with it only when it starts.

Simulated time and wall time never mix: the only wall-clock readings are the policy's round time
(scheduler latency) and the run's total `wall_s`.

A job's tasks run as a gang: the job progresses at the pace of its slowest task, and its completion is
re-planned whenever a task starts or ends on a machine or link it shares (the execution model, see
execution.py). Optional device failures abort the job holding the device; it goes back to the queue and
restarts from scratch once placed again.

This module is the loop (`Simulation`, `simulate`); the simulated cluster is simcluster.py, the events
and records records.py, completion re-planning replan.py.
"""

from __future__ import annotations

import gc
import math
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from disagg.model import Allocation, Cluster, Job
from disagg.model.states import DEVICE_FAILED, DEVICE_HEALTHY
from disagg.model.tenancy import DEFAULT_GRACE_S, DEFAULT_HALF_LIFE_S
from disagg.model.tenants import Tenants
from disagg.placement.backfill import place_round
from disagg.placement.base import Policy, WaitingQueue
from disagg.placement.decisions import Decisions, JobPlacement, Preemption
from disagg.placement.fairness import with_fairness
from disagg.placement.usage import capacity
from disagg.profiles import lookup, normalize_image
from disagg.profiles.learn import EXPLORE, Observation
from disagg.profiles.table import ProfileTable
from disagg.sim.execution import REFERENCE_GBPS, REMOTE_PCIE_SHARE, path_factor
from disagg.sim.kernel import Kernel, Priority
from disagg.sim.learning import knowledge_for
from disagg.sim.records import (
    DeviceFailed,
    DeviceRepaired,
    Event,
    JobArrived,
    JobFinished,
    JobRecord,
    PreemptDue,
    RoundDue,
    SimResult,
)
from disagg.sim.replan import Replanning
from disagg.sim.simcluster import Grant, Running, SimCluster, SimTask, sim_task

__all__ = ["FailureModel", "JobRecord", "SimCluster", "SimConfig", "SimResult", "Simulation", "simulate", "waited"]
from disagg.sim.tenants import TenantLedger, held
from disagg.sim.workload import Submission


@dataclass(frozen=True, slots=True)
class FailureModel:
    """Devices fail after an exponential time with mean `mtbf_s` and come back after one of mean `mttr_s`."""

    mtbf_s: float
    mttr_s: float

    def __post_init__(self) -> None:
        for name in ("mtbf_s", "mttr_s"):
            _positive_finite(name, getattr(self, name))


@dataclass(frozen=True, slots=True)
class SimConfig:
    """How the loop runs. `max_time_s` and `stall_rounds` stop a run that cannot finish; `max_time_s` None:
    `AFTER_LAST_SUBMIT_S` after the workload's last submission (a fixed 10⁷ s cut a six-month trace short,
    its later jobs in no result at all).

    `tenants`: a tenants spec: every round then has a tenancy, and the policy runs with quotas, fair
    share and preemption around it (`placement.fairness`); preempted jobs stop `grace_s` after the
    round that chose them and go back to the queue. `report_tenants`: report per tenant even without a
    spec (the plain policies on a workload with several tenants)."""

    interval_s: float = 5.0
    failures: FailureModel | None = None
    max_time_s: float | None = None
    stall_rounds: int = 2000
    tenants: Tenants | None = None
    report_tenants: bool = False
    half_life_s: float = DEFAULT_HALF_LIFE_S
    grace_s: float = DEFAULT_GRACE_S
    #: W from which the oldest waiting job's reservation holds against every younger job (the
    #: controller's `starvation_rounds`, placement/backfill.py); None: the policies alone, as the seed's.
    starvation_rounds: int | None = None
    #: How jobs really run (`--truth`): their images' true profiles (None: the shipped table).
    truth: ProfileTable | None = None
    #: What the policies know of images (`sim.learning.KNOWLEDGE`) and the table given (`--profiles`).
    knowledge: str = "shipped"
    profiles: ProfileTable | None = None
    #: With learning: remote observations before an image is placed by its pessimistic profile.
    explore: int = EXPLORE

    def __post_init__(self) -> None:
        _positive_finite("interval_s", self.interval_s)
        if self.max_time_s is not None:
            _positive_finite("max_time_s", self.max_time_s)


#: How long a run may go on after its workload's last submission (`SimConfig.max_time_s` None): 10⁷ s.
AFTER_LAST_SUBMIT_S = 10_000_000.0


def _positive_finite(name: str, value: float) -> None:
    """A time the loop steps by or draws from: NaN stopped nothing (a run of NaN times, or one that never
    ended), infinity ended a run after its first round."""
    if not 0.0 < value < math.inf:
        raise ValueError(f"{name}: value {value!r} is not allowed: must be a finite number > 0 seconds")


# -- events --------------------------------------------------------------------------------------------


# -- the loop ------------------------------------------------------------------------------------------


class Simulation(Replanning):
    """One run of one policy over one workload on one cluster. Use `run()` once."""

    def __init__(
        self,
        cluster: Cluster,
        submissions: Sequence[Submission],
        policy: Policy,
        rng: np.random.Generator,
        config: SimConfig | None = None,
        failure_rng: np.random.Generator | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = config or SimConfig()
        if self.config.interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {self.config.interval_s}")
        self.state = SimCluster(cluster)
        self.subs = list(submissions)
        self.policy = with_fairness(policy) if self.config.tenants is not None else policy
        self.tenants: TenantLedger | None = None
        if self.config.tenants is not None or self.config.report_tenants:
            self.tenants = TenantLedger(self.config.tenants, capacity(cluster), self.config.half_life_s,
                                        self.config.grace_s)
        self._kinds: list[str] = [d.kind for d in cluster.devices] if self.tenants is not None else []
        self.rng = rng
        self.failure_rng = failure_rng or np.random.default_rng(0)
        self.clock = clock
        self.kernel: Kernel[Event] = Kernel()
        self.queue: dict[str, Job] = {}
        self.queued_sub: dict[str, Submission] = {}
        self.running: dict[str, Running] = {}
        self.on_machine: list[set[str]] = [set() for _ in cluster.machines]
        self.on_link: dict[str, set[str]] = {lk: set() for lk in self.state.link_cap}
        self.records: dict[str, JobRecord] = {}
        self.latencies = array("d")
        self.gpu_times = array("d", [0.0])
        self.gpu_in_use = array("d", [0.0])
        self.gpus_busy = 0
        self.rounds = 0
        self.conflicts = 0
        self.round_pending = False
        self.to_finish = sum(1 for s in self.subs if not s.warmup) or len(self.subs)
        last = max((s.job.submit_s for s in self.subs), default=0.0)
        self.max_time_s = self.config.max_time_s if self.config.max_time_s is not None else (
            max(last, 0.0) + AFTER_LAST_SUBMIT_S)
        self.finished_counted = 0
        self.idle_rounds = 0
        self.stalled = False
        self.last_decisions: Decisions | None = None
        self.counters = {"placed": 0, "restarts": 0, "failures": 0, "preempted": 0, "slo_at_risk": 0}
        self.progress: Callable[[float], None] | None = None
        #: Raise every waiting job's W after each round, unless the policy says it never reads W
        #: (`reads_wait_rounds = False`: the sequential baselines); rebuilding the queue's jobs is then
        #: work for nothing, a good part of such a run's time on a long queue.
        #: (The starvation bound reads W whatever the policy.)
        self.track_waits = bool(getattr(policy, "reads_wait_rounds", True)) or self.config.starvation_rounds is not None
        #: W kept apart from the queued jobs (`placement.base.WaitingQueue`): a policy that reads it there
        #: (`reads_waiting_queue`) gets the queue as queued, and a job is copied with its W only when it
        #: starts: `wait_ticks` counts the rounds since the run began, and
        #: a job's W is what it was queued with plus the rounds since (`queued_at`). Not with tenants or the
        #: starvation bound, whose wrappers read every job's W.
        self.waits_apart = (self.track_waits and bool(getattr(self.policy, "reads_waiting_queue", False))
                            and self.config.tenants is None and self.config.starvation_rounds is None)
        self.wait_ticks = 0
        self.queued_at: dict[str, int] = {}
        self.knowledge = knowledge_for(self.config.knowledge, self.config.profiles, self.config.truth,
                                       self.config.explore)

    # -- setup --

    def _seed_events(self) -> None:
        for i, sub in enumerate(self.subs):
            self.kernel.schedule(max(sub.job.submit_s, 0.0), Priority.ARRIVAL, JobArrived(i))
        fm = self.config.failures
        if fm is not None:
            for i, d in enumerate(self.state.devices):
                if d.health == DEVICE_HEALTHY:
                    at = float(self.failure_rng.exponential(fm.mtbf_s))
                    self.kernel.schedule(at, Priority.FAILURE, DeviceFailed(i))

    def run(self) -> SimResult:
        """Simulate until every (non-warm-up) job has finished, the run stalls, or max_time_s passes."""
        with collector_eased():
            return self._run()

    def _run(self) -> SimResult:
        wall0 = self.clock()
        self._seed_events()
        k = self.kernel
        while self.finished_counted < self.to_finish:
            item = k.pop()
            if item is None or item.time > self.max_time_s or self.stalled:
                break
            ev = item.event
            if isinstance(ev, JobFinished):
                self._finish(ev.name)
            elif isinstance(ev, JobArrived):
                self._arrive(self.subs[ev.index])
            elif isinstance(ev, RoundDue):
                self._round()
            elif isinstance(ev, DeviceFailed):
                self._fail(ev.device)
            elif isinstance(ev, DeviceRepaired):
                self._repair(ev.device)
            elif isinstance(ev, PreemptDue):
                self._preempted(ev.name)
            if self.progress is not None and k.popped % 500 == 0:
                self.progress(self.finished_counted / self.to_finish)
        for sub in self.subs:  # never started, or never even submitted (a run cut short): "completed" < "jobs"
            self._record_for(sub)
        return SimResult(
            policy=self.policy.name, records=list(self.records.values()), latencies_s=self.latencies,
            gpu_times=self.gpu_times, gpu_in_use=self.gpu_in_use, total_gpus=self.state.total_gpus,
            rounds=self.rounds, conflicts=self.conflicts, sim_end_s=k.now, wall_s=self.clock() - wall0,
            stalled=self.stalled, events=k.popped, counters=dict(self.counters), tenants=self._tenant_report(k.now),
            stalled_jobs=self._stuck(), learning=self.knowledge.report(),
        )

    def _tenant_report(self, end_s: float) -> dict[str, Any] | None:
        if self.tenants is None:
            return None
        out = self.tenants.report(list(self.records.values()), end_s)
        out["series"] = {"times": list(self.tenants.sample_times), "shares": dict(self.tenants.shares)}
        return out

    def _stuck(self) -> list[tuple[str, str]]:
        """The jobs still queued, oldest first, with the policy's reason from the last round."""
        if not self.queue:
            return []
        why = {u.job: u.message for u in self.last_decisions.unplaced} if self.last_decisions else {}
        waiting = sorted(self.queue.values(), key=lambda j: (j.submit_s, j.name))
        return [(j.name, why.get(j.name, "never considered by a round")) for j in waiting]

    # -- arrivals and rounds --

    def _record_for(self, sub: Submission) -> JobRecord:
        rec = self.records.get(sub.job.name)
        if rec is None:
            job = sub.job
            rec = JobRecord(job.name, job.image, job.submit_s, sub.base_s, job.slo_s, sub.warmup, tenant=job.tenant)
            self.records[sub.job.name] = rec
        return rec

    def _enqueue(self, job: Job, sub: Submission) -> None:
        """Queue a job (arrived, or back after a failure or preemption, with the W it had)."""
        self.queue[job.name] = job
        self.queued_sub[job.name] = sub
        self.queued_at[job.name] = self.wait_ticks

    def _wait_rounds(self, job: Job) -> int:
        """A queued job's W now (`waits_apart`; else the queue holds it so already)."""
        return job.wait_rounds + self.wait_ticks - self.queued_at[job.name]

    def _current(self, job: Job) -> Job:
        """A queued job with its W now."""
        extra = self.wait_ticks - self.queued_at[job.name]
        return waited(job, extra) if extra else job

    def _arrive(self, sub: Submission) -> None:
        self._enqueue(sub.job, sub)
        self._record_for(sub)
        self._want_round()

    def _want_round(self) -> None:
        """Make sure a round is pending at the next tick of the interval grid (now, if on the grid)."""
        if self.round_pending:
            return
        step = self.config.interval_s
        now = self.kernel.now
        at = math.ceil(now / step - 1e-9) * step
        self.kernel.schedule(max(at, now), Priority.ROUND, RoundDue())
        self.round_pending = True

    def _round(self) -> None:
        self.round_pending = False
        if not self.queue:
            return
        now = self.kernel.now
        snapshot = self.state.snapshot()
        if self.tenants is not None and self.config.tenants is not None:
            snapshot = snapshot.with_tenancy(self.tenants.tenancy(now, self.queue))
        queue = self.knowledge.apply(list(self.queue.values()), self._remote_in_flight())
        if self.waits_apart:
            queue = WaitingQueue(queue, self._wait_rounds, reasons_later=True)
        t0 = self.clock()
        if self.config.starvation_rounds is None:
            decisions = self.policy.place(snapshot, queue, now, self.rng, clock=self.clock)
        else:
            oldest_first = sorted(queue, key=lambda j: (j.submit_s, j.name))
            decisions = place_round(self.policy, snapshot, oldest_first, [], now, self.rng, self.clock,
                                    self.config.starvation_rounds).decisions
        elapsed = self.clock() - t0
        self.latencies.append(float(decisions.timings.get("round_s", elapsed)))
        self.rounds += 1
        self.last_decisions = decisions
        placed = self._apply(decisions, now)
        self._preempt(decisions.preempted, now)
        if self.tenants is not None:
            self.tenants.sample(now, self.queue.values())
        if self.waits_apart:
            self.wait_ticks += 1
        elif self.track_waits:  # (a queue of thousands on a full cluster: one pass of builtins)
            self.queue = dict(zip(self.queue, map(waited, self.queue.values()), strict=True))
        if placed == 0 and not self.running:
            self.idle_rounds += 1
            if self.idle_rounds >= self.config.stall_rounds and self.kernel.peek_time() is None:
                self.stalled = True
        else:
            self.idle_rounds = 0
        if self.queue:
            self.kernel.schedule(now + self.config.interval_s, Priority.ROUND, RoundDue())
            self.round_pending = True

    # -- applying decisions --

    def _apply(self, decisions: Decisions, now: float) -> int:
        """Start every placement that still fits; re-plan the affected jobs once, after all starts."""
        placed = 0
        dirty: set[str] = set()
        for jp in decisions.placed:
            if jp.job not in self.queue:
                self.conflicts += 1
                continue
            tasks = self._check(jp, self.queue[jp.job])
            if tasks is None:
                self.conflicts += 1
                continue
            dirty |= self._start(jp.job, tasks, now)
            self.counters["slo_at_risk"] += jp.slo_at_risk is not None
            placed += 1
        self._reevaluate(dirty, now)
        return placed

    def _check(self, jp: JobPlacement, job: Job) -> list[SimTask] | None:
        """The placement as tasks, or None when it names what the cluster lacks or would over-commit
        anything (`commit.over_commit` against what is free now, as `SimCluster.fits` answers it for
        the tasks; nothing is changed)."""
        tasks = self._tasks(jp, job)
        return tasks if tasks is not None and self.state.fits(jp, tasks) else None

    def _tasks(self, jp: JobPlacement, job: Job) -> list[SimTask] | None:
        """The placement as tasks, or None when it names a machine or device the cluster lacks."""
        st = self.state
        if len(jp.tasks) != job.tasks.count:
            return None
        profile = lookup(job.image, self.config.truth)
        tasks: list[SimTask] = []
        for tp in jp.tasks:
            m = st.m_index.get(tp.machine)
            if m is None:
                return None
            grants: list[Grant] = []
            for g in tp.devices:
                d = st.d_index.get(g.id)
                if d is None:
                    return None
                dev = st.devices[d]
                remote = dev.location != tp.machine
                links = st.base.path(tp.machine, dev.location) if remote else ()
                # A remote device draws what its job really draws: the job's stated bandwidth, else its
                # image's true profile's (`--truth`), whatever the policy reserved for it (the grant's,
                # from the profile the policy knows). Drawn as the grant said, a learned or neutral image
                # (1 Gbit/s) loaded its links less than the same jobs did under the oracle, and the
                # runs compared different networks (docs/profiles.md, "Sixth pass").
                gbps = (job.network_gbps or profile.network_gbps) if remote else 0.0
                caps = tuple(st.link_cap[lk] for lk in links)
                bottleneck = min(caps, default=REFERENCE_GBPS)
                grants.append(Grant(d, remote, links, gbps, dev.kind, caps, bottleneck,
                                     peers=() if remote else st.peers.get(d, ()),
                                     path_factor=path_factor(profile, bottleneck) if remote else 1.0))
            tasks.append(sim_task(tp.task, m, tp.cpus, tp.memory_gb, grants, st.devices))
        return tasks

    def _start(self, name: str, tasks: list[SimTask], now: float) -> set[str]:
        """Take the resources and start the job; returns the jobs whose pace may have changed."""
        st = self.state
        job = self._current(self.queue.pop(name))  # the W it keeps if it comes back to the queue
        sub = self.queued_sub.pop(name)
        del self.queued_at[name]
        run = Running(sub, job, lookup(job.image, self.config.truth), tasks, now, sub.base_s, 1.0, now)
        gpus = remote_gpus = 0
        for t in tasks:
            st.cpu_free[t.machine] -= t.cpus
            st.mem_free[t.machine] -= t.memory_gb
            st.cpu_used[t.machine] += t.cpus
            run.machines.add(t.machine)
            self.on_machine[t.machine].add(name)
            for g in t.grants:
                st.holder[g.device] = name
                st.link_share[g.device] = run.profile.transfer_share * (REMOTE_PCIE_SHARE if g.remote else 1.0)
                if st.devices[g.device].kind == "gpu":
                    gpus += 1
                    remote_gpus += g.remote
                for lk in g.links:
                    st.link_used[lk] += g.gbps
                    run.own_traffic[lk] = run.own_traffic.get(lk, 0.0) + g.gbps
                    self.on_link[lk].add(name)
            st.allocations[t.name] = Allocation(
                job=name, machine=st.machines[t.machine].name, cpus=t.cpus, memory_gb=t.memory_gb,
                devices=tuple(st.devices[g.device].id for g in t.grants),
                network_gbps=sum(g.gbps for g in t.grants),
            )
        self.running[name] = run
        if self.tenants is not None:
            self.tenants.started(job, held(tasks, self._kinds), now)
        rec = self._record_for(sub)
        rec.start_s = now
        rec.gpus = gpus
        rec.remote_gpus = remote_gpus
        self.counters["placed"] += 1
        self._gpus_changed(now, gpus)
        dirty = self._neighbours(run)  # a new set: the job itself joins it without a copy
        dirty.add(name)
        return dirty

    def _gpus_changed(self, now: float, delta: int) -> None:
        if delta == 0:
            return
        self.gpus_busy += delta
        if self.gpu_times[-1] == now:
            self.gpu_in_use[-1] = self.gpus_busy
        else:
            self.gpu_times.append(now)
            self.gpu_in_use.append(self.gpus_busy)

    def _release(self, run: Running, preempted: bool = False) -> int:
        st = self.state
        gpus = 0
        if self.tenants is not None:
            self.tenants.stopped(run.job.name, self.kernel.now, preempted)
        for t in run.tasks:
            st.cpu_free[t.machine] += t.cpus
            st.mem_free[t.machine] += t.memory_gb
            st.cpu_used[t.machine] -= t.cpus
            self.on_machine[t.machine].discard(run.job.name)
            for g in t.grants:
                st.holder.pop(g.device, None)
                st.link_share.pop(g.device, None)
                gpus += st.devices[g.device].kind == "gpu"
                for lk in g.links:
                    st.link_used[lk] = max(0.0, st.link_used[lk] - g.gbps)
                    self.on_link[lk].discard(run.job.name)
            st.allocations.pop(t.name, None)
        return gpus

    def _finish(self, name: str) -> None:
        run = self.running.pop(name)
        now = self.kernel.now
        self._observe(run, now)
        gpus = self._release(run)
        rec = self.records[name]
        rec.finish_s = now
        if not run.sub.warmup or self.to_finish == len(self.subs):
            self.finished_counted += 1
        self._gpus_changed(now, -gpus)
        self._reevaluate(self._neighbours(run), now, run)
        if self.queue:
            self._want_round()

    def _remote_in_flight(self) -> dict[str, int]:
        """Per image, its jobs running with remote devices (what `learn.exploring` counts); learning only."""
        flying: dict[str, int] = {}
        if self.knowledge.kind == "learned":
            for run in self.running.values():
                if any(g.remote for t in run.tasks for g in t.grants):
                    key = normalize_image(run.job.image)
                    flying[key] = flying.get(key, 0) + 1
        return flying

    def _observe(self, run: Running, now: float) -> None:
        """A finished job as an observation of its image, for the policies' learning (`--learn`)."""
        if self.knowledge.kind != "learned" or now <= run.start_s:
            return
        grants = [g for t in run.tasks for g in t.grants]
        share = sum(g.remote for g in grants) / len(grants) if grants else 0.0
        work = (now - run.last_s) / run.stretch
        done = run.work_done + work
        load = (run.load_area + run.load_now * work) / done if done > 0.0 else run.load_now
        drawn = [g.gbps for g in grants if g.remote]  # what each remote device drew (the fabric's counters)
        self.knowledge.observe(run.job.image, Observation(now - run.start_s, share, load, run.job.slo_s,
                                                          sum(drawn) / len(drawn) if drawn else None))

    # -- preemption --

    def _preempt(self, preemptions: Sequence[Preemption], now: float) -> None:
        """Signal each victim (it keeps running through its grace period, then stops: `_preempted`)."""
        if self.tenants is None:
            return
        for p in preemptions:
            if p.job in self.running and p.job not in self.tenants.preempting:
                self.tenants.preempting[p.job] = p.for_job
                self.kernel.schedule(now + self.config.grace_s, Priority.FINISH, PreemptDue(p.job))

    def _preempted(self, name: str) -> None:
        """The grace period is over: the job stops, gives back what it held and is queued again with
        its wait counter W kept; it will start from scratch (its progress is lost)."""
        run = self.running.get(name)
        if run is None or self.tenants is None or name not in self.tenants.preempting:
            return  # it finished within its grace period
        now = self.kernel.now
        del self.running[name]
        self.kernel.cancel(run.entry_seq)
        gpus = self._release(run, preempted=True)
        self._gpus_changed(now, -gpus)
        self._reevaluate(self._neighbours(run), now, run)
        self.records[name].preempted += 1
        self.counters["preempted"] += 1
        self._enqueue(run.job, run.sub)
        self._want_round()

    # -- failures --

    def _fail(self, device: int) -> None:
        st = self.state
        now = self.kernel.now
        fm = self.config.failures
        assert fm is not None
        st.set_health(device, DEVICE_FAILED)
        self.counters["failures"] += 1
        holder = st.holder.get(device)
        if holder is not None and holder in self.running:
            run = self.running.pop(holder)
            self.kernel.cancel(run.entry_seq)
            gpus = self._release(run)
            self._gpus_changed(now, -gpus)
            self._reevaluate(self._neighbours(run), now, run)
            self.records[holder].restarts += 1
            self.counters["restarts"] += 1
            self._enqueue(run.job, run.sub)  # restarts from scratch, keeps its wait counter
            self._want_round()
        self.kernel.schedule(now + float(self.failure_rng.exponential(fm.mttr_s)), Priority.FAILURE,
                             DeviceRepaired(device))

    def _repair(self, device: int) -> None:
        fm = self.config.failures
        assert fm is not None
        self.state.set_health(device, DEVICE_HEALTHY)
        now = self.kernel.now
        self.kernel.schedule(now + float(self.failure_rng.exponential(fm.mtbf_s)), Priority.FAILURE,
                             DeviceFailed(device))
        if self.queue:
            self._want_round()


#: Allocations between young-generation collections while a simulation runs (Python's default: 700).
SIM_GC_THRESHOLD = 20_000


@contextmanager
def collector_eased() -> Iterator[None]:
    """Ease Python's cyclic garbage collector for one run: what exists when the run begins (the cluster,
    the submissions, the caller's objects) is frozen out of collections (`gc.freeze`), and young
    collections start every `SIM_GC_THRESHOLD` allocations instead of 700. A run allocates millions of
    short-lived acyclic objects (each round's copies of the queued jobs, events, records), which reference
    counting frees; at the default threshold the collector started thousands of collections that found
    nothing, and every older one walked the whole heap. Cycles are still collected (less often), and
    nothing the run decides depends on the collector. The thresholds and the frozen set are restored
    (a caller that froze objects itself keeps them frozen, and then nothing more is frozen)."""
    thresholds = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(SIM_GC_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if freeze:
            gc.unfreeze()


def _as_reserved(jp: JobPlacement, tasks: list[SimTask]) -> JobPlacement:
    """The placement as the over-commit check reads it: each device's path as the simulator will charge
    it, and the bandwidth the policy reserved for it (the grant's; one that left it out, what the
    device will draw). The placement itself when they agree (a policy's do). What a device then draws
    is its job's true bandwidth (`_check`), which the policy may have guessed wrong: its links are
    loaded past what was reserved, as a real network would be, and the next rounds see it.
    `SimCluster.fits` answers `over_commit` of this without making it (the tests check they agree)."""
    pairs = [(g, c) for tp, t in zip(jp.tasks, tasks, strict=True) for g, c in zip(tp.devices, t.grants, strict=True)]
    if all(g.path == c.links and (g.network_gbps or not c.gbps) for g, c in pairs):
        return jp
    return JobPlacement(jp.job, tuple(
        replace(tp, devices=tuple(replace(g, path=c.links, network_gbps=g.network_gbps or c.gbps)
                                  for g, c in zip(tp.devices, t.grants, strict=True)))
        for tp, t in zip(jp.tasks, tasks, strict=True)))


# `waited` fills a fresh Job's slots directly: a frozen dataclass's __init__ goes through
# object.__setattr__ once per field, twice the cost, and this runs for every queued job each round.
_JOB_FIELDS = ("name", "image", "tasks", "submit_s", "importance", "slo_s", "wait_rounds", "network_gbps", "command",
               "tenant", "preemptible", "profile")
if tuple(Job.__slots__) != _JOB_FIELDS:  # pragma: no cover - a new Job field must be copied below
    raise ImportError(f"sim.engine.waited copies {_JOB_FIELDS}, but Job has {Job.__slots__}")
_new_job = object.__new__
(_set_name, _set_image, _set_tasks, _set_submit, _set_importance, _set_slo, _set_wait, _set_gbps,
 _set_command, _set_tenant, _set_preemptible, _set_profile) = (getattr(Job, f).__set__ for f in _JOB_FIELDS)


def waited(job: Job, rounds: int = 1) -> Job:
    """`job.waited()` (`rounds` times), fast (a test checks they are equal)."""
    new = _new_job(Job)
    _set_name(new, job.name)
    _set_image(new, job.image)
    _set_tasks(new, job.tasks)
    _set_submit(new, job.submit_s)
    _set_importance(new, job.importance)
    _set_slo(new, job.slo_s)
    _set_wait(new, job.wait_rounds + rounds)
    _set_gbps(new, job.network_gbps)
    _set_command(new, job.command)
    _set_tenant(new, job.tenant)
    _set_preemptible(new, job.preemptible)
    _set_profile(new, job.profile)
    return new


def simulate(
    cluster: Cluster,
    submissions: Sequence[Submission],
    policy: Policy,
    seed: int,
    config: SimConfig | None = None,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Run one policy over one workload. The policy's rng and the failures' rng derive from `seed`."""
    policy_seq, failure_seq = np.random.SeedSequence([seed, 7]).spawn(2)
    sim = Simulation(cluster, submissions, policy, np.random.default_rng(policy_seq), config,
                     np.random.default_rng(failure_seq))
    sim.progress = progress
    return sim.run()
