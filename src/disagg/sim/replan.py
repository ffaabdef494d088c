"""Completion re-planning: when a job starts or ends, the running jobs that share a machine, a link or
a PCIe link with it (`neighbours`) bank their progress at the old pace and get a new finish time at the
new one (`reevaluate`), their pace being `execution.task_stretch` of their slowest task (`stretch`).
A mixin of `engine.Simulation`, whose state it reads: `state` (the `SimCluster`), `running`,
`on_machine`, `on_link`, `kernel`."""

from __future__ import annotations

from disagg.sim.execution import task_stretch
from disagg.sim.kernel import Kernel, Priority
from disagg.sim.records import Event, JobFinished
from disagg.sim.simcluster import Running, SimCluster


class Replanning:
    """The re-planning half of a simulation (see the module docstring)."""

    state: SimCluster
    running: dict[str, Running]
    on_machine: list[set[str]]
    on_link: dict[str, set[str]]
    kernel: Kernel[Event]

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
        """The job's stretch now: `execution.task_stretch` of its slowest task, each remote device's
        load being the busiest link of its path as used by others; and the busiest of those loads (0
        without remote devices). Runs for every job that shares a machine or link with each start and
        finish."""
        st = self.state
        used = st.link_used
        own = run.own_traffic
        profile = run.profile
        machines = st.machines
        worst = 1.0
        busiest = 0.0
        for t in run.tasks:
            for g in t.transfer:
                if g.peers and not g.remote:
                    g.pcie = sum(st.link_share.get(p, 0.0) for p in g.peers)
            for g in t.remote_transfer:
                load = 0.0
                for lk, cap in zip(g.links, g.caps, strict=True):
                    share = (used[lk] - own.get(lk, 0.0)) / cap
                    if share > load:
                        load = share
                g.load = load
                if load > busiest:
                    busiest = load
            total_cpus = machines[t.machine].cpus
            others = (st.cpu_used[t.machine] - t.cpus) / total_cpus if total_cpus > 0 else 0.0
            cache = t.memory_gb / (t.memory_gb + t.remote_memory_gb) if t.remote_memory_gb > 0.0 else None
            stretch = task_stretch(profile, t.transfer, others, cache)
            if stretch > worst:
                worst = stretch
        return worst, busiest

    def _reevaluate(self, names: set[str], now: float) -> None:
        """Bank progress at the old pace, then re-plan completion at the new one. Sorted: deterministic."""
        running, kernel = self.running, self.kernel
        for name in sorted(names):
            run = running.get(name)
            if run is None:
                continue
            work = (now - run.last_s) / run.stretch
            run.remaining = max(0.0, run.remaining - work)
            run.load_area += run.load_now * work
            run.work_done += work
            run.last_s = now
            new, run.load_now = self._stretch(run)
            if run.finish_seq >= 0 and abs(new - run.stretch) < 1e-12:
                continue
            run.stretch = new
            if run.finish_seq >= 0:
                kernel.cancel(run.finish_seq)
            at = now + run.remaining * new
            run.finish_seq = kernel.schedule(at, Priority.FINISH, JobFinished(name))
