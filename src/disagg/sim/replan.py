"""Completion re-planning: when a job starts or ends, the running jobs that share a machine, a link or
a PCIe link with it (`neighbours`) bank their progress at the old pace and get a new finish time at the
new one (`reevaluate`), their pace being `execution.task_stretch` of their slowest task (`stretch_of`,
or `one_path_stretch` for the commonest shape), read from what stays fixed while a job runs (`plan_of`,
worked out at its first re-plan). A neighbour's inputs change at each re-plan, and its progress must be
banked at each (the finish times depend on where the rounding falls), so every neighbour is visited;
what is saved is the work per visit. A mixin of `engine.Simulation`, whose state it reads: `state`
(the `SimCluster`), `running`, `on_machine`, `on_link`, `kernel`, `knowledge`.

`_reevaluate` visits some 140,000 runs a run (paper-128m-4096j), and saves work per visit, every value
kept to the bit:
- The load integral (`load_area`, `work_done`) is kept only for learning, its one reader
  (`engine._observe`): two fewer updates per neighbour otherwise.
- A one-path run's stretch (`one_path_stretch`, its path's load `_path_load`), and a one-local-device
  run's (`OneLocal`: `stretch_of`'s `0.0 +` and `/ 1` left out, which change no value: the term is at
  least 1), are spelt out, the same operations in the same order, rather than a call or three deep
  (`stretch_of` for the rest).
- After a release (a finish, failure or preemption) a one-path run's stretch is not worked out again
  when the hop that decided its load (`Running.top`: the first at the maximum, None when no share is
  above 0) and its machine are not the freed run's: every other hop's use can only have dropped, so
  the load, its machine's cpus, and the stretch are what they were, and the visit banks progress and
  moves nothing (its stretch was that value, or within 1e-12 of it and left as it was). Any change to
  a hop's use visits every run on the hop, so what `top` says is never stale. A third of one-path
  visits end there (31,149 of 119,137 on paper-128m-4096j); a start (more use) always works it out."""

from __future__ import annotations

from collections.abc import Sequence
from heapq import heappush
from itertools import repeat

from disagg.model import Machine
from disagg.sim.execution import COLLOCATION_KAPPA, memory_slowdown
from disagg.sim.kernel import Kernel, Priority
from disagg.sim.learning import Knowledge
from disagg.sim.records import Event, JobFinished
from disagg.sim.simcluster import Grant, OneLocal, OnePath, RemotePath, Running, RunPlan, SimCluster, TaskPlan

#: The default of each peer's `link_share.get` (a device nobody holds uses none of its link).
_ZEROS = repeat(0.0)


class Replanning:
    """The re-planning half of a simulation (see the module docstring)."""

    state: SimCluster
    running: dict[str, Running]
    on_machine: list[set[str]]
    on_link: dict[str, set[str]]
    kernel: Kernel[Event]
    knowledge: Knowledge

    def _neighbours(self, run: Running) -> set[str]:
        """The running jobs whose pace this one's start or end may change: on its machines, on its links,
        and on the PCIe links of its devices."""
        out: set[str] = set()
        for m in run.machines:
            out |= self.on_machine[m]
        for lk in run.own_traffic:
            out |= self.on_link[lk]
        peers, holder = self.state.peers, self.state.holder
        if peers:
            for t in run.tasks:
                for g in t.grants:
                    for p in peers.get(g.device, ()):
                        if p in holder:
                            out.add(holder[p])
        out.discard(run.job.name)
        return out

    # -- the execution model applied --

    def _stretch(self, run: Running) -> tuple[float, float]:
        """The job's stretch now and the busiest load of its remote paths, from its plan (as
        `_reevaluate` works them out, which spells this out in its loop)."""
        st = self.state
        plan = run.plan if run.plan is not None else plan_of(run, st.machines)
        return plan_stretch(plan, st.link_used, st.link_share, st.cpu_used)

    def _reevaluate(self, names: set[str], now: float, freed: Running | None = None) -> None:
        """Bank progress at the old pace, then re-plan completion at the new one. Sorted: deterministic.
        `freed`: the run whose release alone changed the cluster since the neighbours' last visits (a
        finish, failure or preemption). What each shortcut spares, and why no value changes: the module docstring."""
        running, st = self.running, self.state
        freed_links, freed_machines = (freed.own_traffic, freed.machines) if freed is not None else (None, set())
        used, link_share, cpu_used, machines = st.link_used, st.link_share, st.cpu_used, st.machines
        learns = self.knowledge.kind == "learned"
        kappa = COLLOCATION_KAPPA
        # The finish events to move, in this (sorted) order: `Kernel.reschedule_many` spelt out, + `deferrals`.
        heap, dead, seq = self.kernel.batch()
        deferred = self.kernel.deferrals()
        finish, get = int(Priority.FINISH), running.get
        for name in sorted(names):
            run = get(name)
            if run is None:
                continue
            old = run.stretch
            work = (now - run.last_s) / old
            remaining = run.remaining - work
            remaining = run.remaining = remaining if remaining > 0.0 else 0.0  # max(0.0, remaining), as max decides
            if learns:
                run.load_area += run.load_now * work
                run.work_done += work
            run.last_s = now
            plan = run.plan
            if plan is None:
                plan = run.plan = plan_of(run, machines)
            one = plan.one
            if one is not None:  # `one_path_stretch`, inline
                hops, d, factor, machine, cpus, machine_cpus, ts, rest, sens = one
                if (freed_links is not None and run.top not in freed_links and machine not in freed_machines
                        and run.finish_seq >= 0):
                    continue  # what decides its stretch is as it was: so is the stretch (module docstring)
                load, top = 0.0, None
                for lk, cap, own in hops:
                    share = (used[lk] - own) / cap
                    if share > load:
                        load, top = share, lk
                d.load, run.top = load, top
                load = run.load_now = 1.0 if load > 1.0 else load  # (the mean of one: what learning reads)
                new = 1.0 if ts <= 0.0 else rest + ts * (factor * (1.0 + sens * load))
                others = (cpu_used[machine] - cpus) / machine_cpus if machine_cpus > 0 else 0.0
                others = 0.0 if others < 0.0 else others
                new = new * (1.0 + kappa * (1.0 if others > 1.0 else others))
                new = new if new > 1.0 else 1.0
            elif plan.local is not None:  # `stretch_of` of one local device, inline: see `OneLocal`
                d, peers, machine, cpus, machine_cpus, ts, rest = plan.local
                if peers:
                    d.pcie = sum(map(link_share.get, peers, _ZEROS))
                x = d.pcie
                x = 0.0 if x < 0.0 else x
                run.load_now = 0.0
                new = 1.0 if ts <= 0.0 else rest + ts * (1.0 + (1.0 if x > 1.0 else x))
                others = (cpu_used[machine] - cpus) / machine_cpus if machine_cpus > 0 else 0.0
                others = 0.0 if others < 0.0 else others
                new = new * (1.0 + kappa * (1.0 if others > 1.0 else others))
                new = new if new > 1.0 else 1.0
            else:
                new, run.load_now = stretch_of(plan.tasks, plan.transfer_share, plan.load_sensitivity, used,
                                               link_share, cpu_used)
            was = run.finish_seq
            if was >= 0 and -1e-12 < new - old < 1e-12:  # (abs(new - old) < 1e-12, less a call)
                continue
            run.stretch = new
            at = run.finish_at = now + remaining * new  # never before now (remaining >= 0, new >= 1)
            run.finish_seq = seq
            if was >= 0:
                entry = run.entry_seq
                if at >= run.entry_at:  # later than its heap entry, which stands in for it (`Kernel.deferrals`)
                    deferred[entry] = run
                    seq += 1
                    continue
                dead.add(entry)
                if entry != was:  # it stood in for `was`
                    del deferred[entry]
            heappush(heap, (at, finish, seq, plan.finished))
            run.entry_at, run.entry_seq = at, seq
            seq += 1
        self.kernel.settle(seq)


def plan_of(run: Running, machines: Sequence[Machine]) -> RunPlan:
    """The run as re-planning reads it: what stays fixed while it lasts (its profile's numbers, its
    machines' sizes, its own traffic per link, its remote memory's slowdown, its finish event), worked
    out once rather than at each of its re-plans."""
    own = run.own_traffic
    tasks: list[TaskPlan] = []
    for t in run.tasks:
        local = tuple(d for d in t.transfer if not d.remote)
        far = tuple(d for d in t.transfer if d.remote)
        if [*local, *far] != t.transfer:
            raise ValueError(f"task {t.name}: its local transfer devices must come first (the model's sum)")
        remote = tuple(RemotePath(d, _hops(d, own), d.path_factor) for d in far)
        memory = (memory_slowdown(t.memory_gb / (t.memory_gb + t.remote_memory_gb))
                  if t.remote_memory_gb > 0.0 else None)
        tasks.append(TaskPlan(t.machine, t.cpus, machines[t.machine].cpus, local, remote, memory))
    one = None
    profile = run.profile
    if len(tasks) == 1 and not tasks[0].local and len(tasks[0].remote) == 1 and tasks[0].memory is None:
        t0, (d, hops, factor) = tasks[0], tasks[0].remote[0]
        ts = profile.transfer_share
        one = OnePath(hops, d, factor, t0.machine, t0.cpus, t0.machine_cpus, ts, 1.0 - ts, profile.load_sensitivity)
    alone = None
    if len(tasks) == 1 and len(tasks[0].local) == 1 and not tasks[0].remote and tasks[0].memory is None:
        t0, ts = tasks[0], profile.transfer_share
        alone = OneLocal(t0.local[0], t0.local[0].peers, t0.machine, t0.cpus, t0.machine_cpus, ts, 1.0 - ts)
    return RunPlan(profile.transfer_share, profile.load_sensitivity, JobFinished(run.job.name), one,
                   tuple(tasks), alone)


def _hops(d: Grant, own: dict[str, float]) -> tuple[tuple[str, float, float], ...]:
    """A remote device's path as `stretch_of` walks it: each link, its capacity, its holder's own traffic."""
    return tuple((lk, cap, own.get(lk, 0.0)) for lk, cap in zip(d.links, d.caps, strict=True))


def plan_stretch(plan: RunPlan, used: dict[str, float], link_share: dict[int, float], cpu_used: list[float]
                 ) -> tuple[float, float]:
    """A run's stretch now and its remote devices' mean load (each capped at 1: the load φ's `load`
    means for it, `profiles.observe.path_load`), from its plan: `one_path_stretch` for the commonest
    shape, else `stretch_of`."""
    if plan.one is not None:
        return one_path_stretch(plan.one, used, cpu_used)
    return stretch_of(plan.tasks, plan.transfer_share, plan.load_sensitivity, used, link_share, cpu_used)


def _path_load(hops: tuple[tuple[str, float, float], ...], used: dict[str, float]) -> float:
    """The busiest link of a remote device's path as used by others (0 at least)."""
    load = 0.0
    for lk, cap, own in hops:
        share = (used[lk] - own) / cap
        if share > load:
            load = share
    return load


def stretch_of(plan: tuple[TaskPlan, ...], ts: float, sens: float, used: dict[str, float],
               link_share: dict[int, float], cpu_used: list[float]) -> tuple[float, float]:
    """A run's stretch now: `execution.task_stretch` of its slowest task, each remote device's load
    being the busiest link of its path as used by others; and the mean of those loads, each capped at 1
    (0 without remote devices): the task's transfer part stretches by each device's own load, so φ
    explains the run at their mean, where the busiest read a job with one quiet and one busy path as
    run wholly at the busy load (learning's acme/etl, docs/profiles.md "Sixth pass").

    Runs for every job that shares a machine or link with each start and finish (some 120,000 times in
    a long run), so the model's factors are written out here, the same operations in
    the same order as `task_stretch` (`stretch_matches_the_model` checks that they agree to the bit),
    instead of five calls per task; `min(max(x, 0.0), 1.0)` is spelt as the conditionals that the
    builtins evaluate (`max(a, b)` is `b if b > a else a`), which skips two calls."""
    worst = 1.0
    loads = 0.0
    far = 0
    for machine, cpus, machine_cpus, local, remote, memory in plan:
        total = 0.0
        for d in local:
            if d.peers:
                d.pcie = sum(map(link_share.get, d.peers, _ZEROS))
            x = d.pcie
            x = 0.0 if x < 0.0 else x
            total += 1.0 + (1.0 if x > 1.0 else x)  # pcie_factor
        for d, hops, factor in remote:
            d.load = load = _path_load(hops, used)
            load = 1.0 if load > 1.0 else load
            loads += load
            far += 1
            # · link_load_factor (load >= 0.0 here, so the max with 0.0 is load itself)
            total += factor * (1.0 + sens * load)
        n = len(local) + len(remote)
        others = (cpu_used[machine] - cpus) / machine_cpus if machine_cpus > 0 else 0.0
        others = 0.0 if others < 0.0 else others
        # execution.transfer_stretch
        stretch = 1.0 if not n or ts <= 0.0 else (1.0 - ts) + ts * total / n
        stretch = stretch * (1.0 + COLLOCATION_KAPPA * (1.0 if others > 1.0 else others))  # collocation_factor
        if memory is not None:
            stretch *= memory
        if stretch > worst:
            worst = stretch
    return worst, (loads / far if far else 0.0)


def one_path_stretch(one: OnePath, used: dict[str, float], cpu_used: list[float]) -> tuple[float, float]:
    """`stretch_of` for a run of one task with one remote transfer device and no remote memory (most
    runs): the same operations, less its loops over one item and two that change no value: the sum's
    `0.0 +` (which would only turn a -0.0 into 0.0, and the term is positive) and the mean's `/ 1`."""
    hops, d, factor, machine, cpus, machine_cpus, ts, rest, sens = one
    d.load = load = _path_load(hops, used)
    total = factor * (1.0 + sens * (1.0 if load > 1.0 else load))
    others = (cpu_used[machine] - cpus) / machine_cpus if machine_cpus > 0 else 0.0
    others = 0.0 if others < 0.0 else others
    stretch = 1.0 if ts <= 0.0 else rest + ts * total
    stretch = stretch * (1.0 + COLLOCATION_KAPPA * (1.0 if others > 1.0 else others))
    return (stretch if stretch > 1.0 else 1.0), (1.0 if load > 1.0 else load)
