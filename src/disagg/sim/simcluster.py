"""The simulated cluster: the simulator's own mutable view of what is free and who holds what
(`SimCluster`, a `commit.Room` for the re-check before a placement starts), and the running jobs'
tasks and device grants as the execution model reads them (`Running`, `SimTask`, `Grant`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from disagg.model import Allocation, Cluster, Device, Job
from disagg.model.states import DEVICE_HEALTHY
from disagg.placement.commit import EPS
from disagg.placement.decisions import JobPlacement
from disagg.profiles import Profile
from disagg.sim.execution import GPUS_PER_PCIE_LINK, REFERENCE_GBPS
from disagg.sim.records import JobFinished
from disagg.sim.workload import Submission

#: Kinds whose remote use moves data over the network in the transfer part (memory is modelled apart).
TRANSFER_KINDS = ("gpu", "nvme", "fpga")


@dataclass(slots=True)
class Grant:
    """A device a task holds, as the execution model reads it (an `execution.DeviceView`). For a remote
    one: the links of its path, their capacities and the slowest of them (fixed for the grant's life),
    and `load`, the busiest link's use by others, set before each re-evaluation."""

    device: int
    remote: bool
    links: tuple[str, ...]
    gbps: float
    kind: str = "gpu"
    caps: tuple[float, ...] = ()
    bottleneck_gbps: float = REFERENCE_GBPS
    load: float = 0.0
    #: The devices that share this one's PCIe link (execution.GPUS_PER_PCIE_LINK), and, set before each
    #: re-evaluation of a local one, the share of time other jobs move data over that link.
    peers: tuple[int, ...] = ()
    pcie: float = 0.0
    #: A remote one's `execution.path_factor` for its holder's profile on this path (fixed for its life).
    path_factor: float = 1.0


@dataclass(slots=True)
class SimTask:
    name: str
    machine: int
    cpus: float
    memory_gb: float
    grants: list[Grant]
    #: The transfer-bearing devices, local ones first (the model's sum adds them in this order).
    transfer: list[Grant] = field(default_factory=list)
    remote_transfer: list[Grant] = field(default_factory=list)
    remote_memory_gb: float = 0.0


class RemotePath(NamedTuple):
    """A remote transfer device as re-planning reads it: fixed for its grant's life, so worked out once
    per run instead of at each of the run's re-plans (`replan.plan_of`)."""

    grant: Grant
    #: Per link of the path: the link, its capacity and the holder's own traffic on it (0.0 if none).
    hops: tuple[tuple[str, float, float], ...]
    factor: float  # the grant's path factor


class TaskPlan(NamedTuple):
    """What re-planning reads of a task that never changes while it runs (`replan.plan_of`)."""

    machine: int
    cpus: float
    machine_cpus: float
    #: The transfer-bearing devices: local ones (summed first, as the model does), then remote ones.
    local: tuple[Grant, ...]
    remote: tuple[RemotePath, ...]
    #: The memory slowdown of its remote memory (`execution.memory_slowdown`); None without any.
    memory: float | None


class OnePath(NamedTuple):
    """The commonest run in the paper's scenarios, one task with one remote transfer device and no
    remote memory, as `replan.one_path_stretch` reads it (the general loop's tuples unpacked once, and
    its run's profile numbers with them: one unpacking per re-plan, some 120,000 a run)."""

    hops: tuple[tuple[str, float, float], ...]
    grant: Grant
    factor: float
    machine: int
    cpus: float
    machine_cpus: float
    #: The run's transfer share, 1 less it (the same float each re-plan worked out), and load sensitivity.
    transfer_share: float
    rest_share: float
    load_sensitivity: float


class OneLocal(NamedTuple):
    """The next commonest run (a sixth of the paper's re-plans): one task with one local transfer
    device and no remote memory, as `replan.Replanning._reevaluate` reads it (its PCIe link's other
    devices, its machine, its run's transfer share and 1 less it)."""

    grant: Grant
    peers: tuple[int, ...]
    machine: int
    cpus: float
    machine_cpus: float
    transfer_share: float
    rest_share: float


class RunPlan(NamedTuple):
    """What re-planning reads of a run that never changes while it runs (`replan.plan_of`)."""

    transfer_share: float
    load_sensitivity: float
    #: Its finish event, made once: a run's finish is moved at many of its neighbours' starts and ends.
    finished: JobFinished
    #: Its one task as `OnePath` where it has that shape, else None (`tasks` then).
    one: OnePath | None
    tasks: tuple[TaskPlan, ...]
    #: Its one task as `OneLocal` where it has that shape, else None.
    local: OneLocal | None = None


@dataclass(slots=True)
class Running:
    sub: Submission
    job: Job
    profile: Profile
    tasks: list[SimTask]
    start_s: float
    remaining: float
    stretch: float
    last_s: float
    #: Its finish as last re-planned (seq -1: none yet), and the heap entry standing for it, which may
    #: be an earlier one (`kernel.Deferred`; `Replanning._reevaluate` moves most finishes later).
    finish_seq: int = -1
    finish_at: float = 0.0
    entry_seq: int = -1
    entry_at: float = 0.0
    own_traffic: dict[str, float] = field(default_factory=dict)
    machines: set[int] = field(default_factory=set)
    #: Its remote devices' mean load by others now (`replan.plan_stretch`), and its integral over the work done so far
    #: (learning): weighted by work, not time, the mean load is the one whose pace the run took.
    load_now: float = 0.0
    load_area: float = 0.0
    work_done: float = 0.0
    #: A one-path run's hop whose use by others decided its load at its last re-plan (None: none above 0).
    top: str | None = None
    #: Its tasks' constants for re-planning, worked out at its first re-plan (`replan.plan_of`).
    plan: RunPlan | None = None


class SimCluster:
    """The simulator's own mutable view of the cluster: what is free, who holds what, link traffic."""

    def __init__(self, cluster: Cluster) -> None:
        self.base = cluster
        self.machines = cluster.machines
        self.m_index = dict(cluster.machine_index)
        self.cpu_free = [m.cpus for m in cluster.machines]
        self.mem_free = [m.memory_gb for m in cluster.machines]
        self.cpu_used = [0.0] * len(cluster.machines)
        self.devices: list[Device] = list(cluster.devices)
        self.d_index = {d.id: i for i, d in enumerate(self.devices)}
        self.holder: dict[int, str] = {}
        #: Per held device, how much of its PCIe link its holder's transfers use: the holder's transfer
        #: share, times REMOTE_PCIE_SHARE when the device is remote to it (execution.pcie_factor).
        self.link_share: dict[int, float] = {}
        #: Per device, the other devices on its PCIe link.
        self.peers = pcie_peers(self.devices)
        self.link_cap = {lk.id: lk.gbps for lk in cluster.links}
        self.link_used = dict.fromkeys(self.link_cap, 0.0)
        self.allocations: dict[str, Allocation] = {
            f"{a.job}#pre{i}": a for i, a in enumerate(cluster.allocations)
        }
        for a in cluster.allocations:  # pre-existing use in the spec holds its share for the whole run
            m = self.m_index[a.machine]
            self.cpu_free[m] -= a.cpus
            self.mem_free[m] -= a.memory_gb
            self.cpu_used[m] += a.cpus
            for did in a.devices:
                self.holder[self.d_index[did]] = a.job
        self._devices_tuple: tuple[Device, ...] = tuple(self.devices)
        self._inventory = self._bare()
        self.total_gpus = sum(1 for d in self.devices if d.kind == "gpu")

    def snapshot(self) -> Cluster:
        """A fresh immutable snapshot; the static parts are shared, allocations are the current ones.
        The inventory's indexes that the last snapshot's round worked out are kept (`with_allocations`)
        until a device's health changes."""
        snap = self._inventory.with_allocations(tuple(self.allocations.values()))
        self._inventory = snap
        return snap

    def set_health(self, device: int, health: str) -> None:
        self.devices[device] = replace(self.devices[device], health=health)  # type: ignore[arg-type]
        self._devices_tuple = tuple(self.devices)
        self._inventory = self._bare()

    def _bare(self) -> Cluster:
        """The inventory as it is now, with nothing running (what each round's snapshot is built on)."""
        b = self.base
        return Cluster(machines=b.machines, pools=b.pools, devices=self._devices_tuple,
                       rack_uplink_gbps=b.rack_uplink_gbps)

    # -- what is free now, as `commit.Room` (the re-check before a placement starts) --

    def fits(self, jp: JobPlacement, tasks: Sequence[SimTask]) -> bool:
        """`commit.over_commit(engine._as_reserved(jp, tasks), self) is None`, for the placement's own
        tasks (`engine.Simulation._tasks`: every machine and device known): the same sums in the same
        order, by index, without the problem's words (the engine only counts a conflict) or the ten
        `Room` calls of a one-device placement, and in any order of checks, as a yes or no does not
        depend on which problem comes first. A device's path and bandwidth are the reserved ones
        (`_as_reserved`: the grant's links, the policy's bandwidth or else the grant's). Links do not
        fail here (`link_down`); one not metered has room for anything (`link_left`)."""
        need_cpu: dict[int, float] = {}
        need_mem: dict[int, float] = {}
        need_link: dict[str, float] = {}
        seen: set[int] = set()
        holder, devices = self.holder, self.devices
        for tp, t in zip(jp.tasks, tasks, strict=True):
            m = t.machine
            need_cpu[m] = need_cpu.get(m, 0.0) + tp.cpus
            need_mem[m] = need_mem.get(m, 0.0) + tp.memory_gb
            for g, c in zip(tp.devices, t.grants, strict=True):
                d = c.device
                if d in seen or d in holder or devices[d].health != DEVICE_HEALTHY:
                    return False
                gbps = g.network_gbps or c.gbps
                for lk in c.links:
                    need_link[lk] = need_link.get(lk, 0.0) + gbps
                seen.add(d)
        cpu_free, mem_free = self.cpu_free, self.mem_free
        for m, cpus in need_cpu.items():
            if cpus > cpu_free[m] + EPS or need_mem[m] > mem_free[m] + EPS:  # commit.exceeds
                return False
        cap, used = self.link_cap, self.link_used
        return not any(lk in cap and gbps > cap[lk] - used[lk] + EPS for lk, gbps in need_link.items())

    def cpus_left(self, machine: str) -> float | None:
        m = self.m_index.get(machine)
        return None if m is None else self.cpu_free[m]

    def memory_left(self, machine: str) -> float:
        return self.mem_free[self.m_index[machine]]

    def device_problem(self, device_id: str) -> str | None:
        d = self.d_index.get(device_id)
        if d is None:
            return "is not in the inventory"
        if d in self.holder:
            return "is already held"
        health = self.devices[d].health
        return None if health == DEVICE_HEALTHY else f"is {health}"

    def link_left(self, link: str) -> float:
        cap = self.link_cap.get(link)
        return math.inf if cap is None else cap - self.link_used[link]

    def link_down(self, link: str) -> bool:
        """Links do not fail in the simulator."""
        return False




def pcie_peers(devices: Sequence[Device]) -> dict[int, tuple[int, ...]]:
    """Per device of a model whose GPUs share a PCIe link (execution.GPUS_PER_PCIE_LINK), the other
    devices on its link: at the same location, of the same model, paired up by index (0-1, 2-3, …)."""
    boards: dict[tuple[str, str, int], list[int]] = {}
    for i, d in enumerate(devices):
        per_link = GPUS_PER_PCIE_LINK.get(d.model, 1)
        if d.kind == "gpu" and per_link > 1:
            boards.setdefault((d.location, d.model, d.index // per_link), []).append(i)
    return {i: tuple(j for j in members if j != i) for members in boards.values() for i in members}


def sim_task(name: str, machine: int, cpus: float, memory_gb: float, grants: list[Grant],
          devices: list[Device]) -> SimTask:
    """A task with its devices sorted for the model: transfer-bearing local/remote, remote memory."""
    t = SimTask(name, machine, cpus, memory_gb, grants)
    for g in grants:
        if g.kind in TRANSFER_KINDS:
            (t.remote_transfer if g.remote else t.transfer).append(g)
        elif g.kind == "memory" and g.remote:
            t.remote_memory_gb += devices[g.device].capacity
    t.transfer += t.remote_transfer
    return t
