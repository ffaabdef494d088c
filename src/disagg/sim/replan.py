"""Completion re-planning: when a job starts or ends, the running jobs that share a machine, a link or
a PCIe link with it (`neighbours`) bank their progress at the old pace and get a new finish time at the
new one (`reevaluate`), their pace being `execution.task_stretch` of their slowest task (`stretch`).
A mixin of `engine.Simulation`, whose state it reads: `state` (the `SimCluster`), `running`,
`on_machine`, `on_link`, `kernel`."""

from __future__ import annotations

from itertools import repeat

from disagg.sim.execution import COLLOCATION_KAPPA, memory_slowdown
from disagg.sim.kernel import Kernel, Priority
from disagg.sim.records import Event, JobFinished
from disagg.sim.simcluster import Running, SimCluster

#: The default of each peer's `link_share.get` (a device nobody holds uses none of its link).
_ZEROS = repeat(0.0)


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
        finish (some 120,000 times in a long run), so the model's factors are written out here, the
        same operations in the same order as `task_stretch` (`stretch_matches_the_model` checks that
        they agree to the bit), instead of five calls per task."""
        st = self.state
        used, link_share, cpu_used, machines = st.link_used, st.link_share, st.cpu_used, st.machines
        own = run.own_traffic
        profile = run.profile
        ts, sens = profile.transfer_share, profile.load_sensitivity
        worst = 1.0
        busiest = 0.0
        for t in run.tasks:
            transfer = t.transfer
            total = 0.0
            # One pass over the task's transfer-bearing devices (local ones first, as the model sums
            # them): each device's PCIe share or path load, and its factor.
            for d in transfer:
                if d.remote:
                    load = 0.0
                    for lk, cap in zip(d.links, d.caps, strict=True):
                        share = (used[lk] - own.get(lk, 0.0)) / cap
                        if share > load:
                            load = share
                    d.load = load
                    if load > busiest:
                        busiest = load
                    total += d.path_factor * (1.0 + sens * min(max(load, 0.0), 1.0))  # · link_load_factor
                else:
                    if d.peers:
                        d.pcie = sum(map(link_share.get, d.peers, _ZEROS))
                    total += 1.0 + min(max(d.pcie, 0.0), 1.0)  # pcie_factor
            total_cpus = machines[t.machine].cpus
            others = (cpu_used[t.machine] - t.cpus) / total_cpus if total_cpus > 0 else 0.0
            # execution.transfer_stretch
            stretch = 1.0 if not transfer or ts <= 0.0 else (1.0 - ts) + ts * total / len(transfer)
            stretch = stretch * (1.0 + COLLOCATION_KAPPA * min(max(others, 0.0), 1.0))  # collocation_factor
            if t.remote_memory_gb > 0.0:
                stretch *= memory_slowdown(t.memory_gb / (t.memory_gb + t.remote_memory_gb))
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
