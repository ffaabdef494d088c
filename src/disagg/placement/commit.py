"""Nothing over-committed: the one rule, and the one check of a placement against the room left.

A policy decides on a snapshot; whoever applies its decisions (the simulator, the controller's commit)
re-checks each placement against what is left *now*, because the world may have moved since the
snapshot (Nomad's plan re-validation). `over_commit` is that check; `exceeds` is the rule it and the
policies' own `FreeState` reservations share, so a placement a policy made fits when it is applied
to the same room.

Who provides the room: anything with the `Room` methods. `RoomLedger` is the plain one (dicts of what
is left), filled from a snapshot (`RoomLedger.of`) or by the caller; a caller that commits several
placements in one go checks each with `over_commit` and then `take`s it, so each is checked against
what the ones before it took. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from disagg.model import Cluster
from disagg.model.states import DEVICE_HEALTHY
from disagg.placement.decisions import JobPlacement

#: Slack for sums of floats: a need that exceeds what is free by no more than this still fits.
EPS = 1e-9


def exceeds(need: float, free: float) -> bool:
    """Whether `need` is more than `free` can give (beyond `EPS` of rounding)."""
    return need > free + EPS


class Room(Protocol):
    """What is left to commit to, as the checker asks for it."""

    def cpus_left(self, machine: str) -> float | None:
        """Free cpus on the machine; None when the machine is not in the inventory."""
        ...

    def memory_left(self, machine: str) -> float:
        """Free memory (GB) on a machine that `cpus_left` knows."""
        ...

    def device_problem(self, device_id: str) -> str | None:
        """None when the device is free and usable; else what is wrong, as the end of a sentence that
        starts with "device <id>": "is already held", "is failed", "is drained", "is not in the inventory"."""
        ...

    def link_left(self, link: str) -> float:
        """Gbit/s still free on the link (`math.inf` when it is not metered)."""
        ...

    def link_down(self, link: str) -> bool:
        """Whether the link is down."""
        ...


def over_commit(p: JobPlacement, room: Room) -> str | None:
    """Why applying this placement now would over-commit something, or None when it fits.

    Checked: every machine is known; no device is granted twice within the placement, and each is
    free and usable; no link a remote device's traffic crosses is down; the placement's cpus and
    memory per machine, and its `network_gbps` on every link of every remote device's path, fit
    in what is left. The first problem found is the answer.
    """
    free: dict[str, float] = {}  # cpus left on each machine the placement uses
    need_cpu: dict[str, float] = {}
    need_mem: dict[str, float] = {}
    need_link: dict[str, float] = {}
    seen: set[str] = set()
    for t in p.tasks:
        if t.machine not in free:
            left = room.cpus_left(t.machine)
            if left is None:
                return f"machine {t.machine} is not in the inventory"
            free[t.machine] = left
        need_cpu[t.machine] = need_cpu.get(t.machine, 0.0) + t.cpus
        need_mem[t.machine] = need_mem.get(t.machine, 0.0) + t.memory_gb
        for g in t.devices:
            problem = "is already held" if g.id in seen else room.device_problem(g.id)
            if problem is not None:
                return f"device {g.id} {problem}"
            hit = [lk for lk in g.path if room.link_down(lk)]
            if hit:
                return f"link {hit[0]} to device {g.id} is down"
            for lk in g.path:
                need_link[lk] = need_link.get(lk, 0.0) + g.network_gbps
            seen.add(g.id)
    for m, cpus in need_cpu.items():
        if exceeds(cpus, free[m]):
            return f"machine {m} has {free[m]:g} cpus free, the job needs {cpus:g}"
        memory = room.memory_left(m)
        if exceeds(need_mem[m], memory):
            return f"machine {m} has {memory:g} GB free, the job needs {need_mem[m]:g}"
    for lk, gbps in need_link.items():
        bandwidth = room.link_left(lk)
        if exceeds(gbps, bandwidth):
            return f"link {lk} has {max(bandwidth, 0.0):g} Gbit/s left, the job needs {gbps:g}"
    return None


@dataclass
class RoomLedger:
    """A `Room` kept in dicts: what a caller read of the world, less what it has committed since.

    `devices` maps every device the placements may name to its problem (None: free and usable); a
    device it does not list is not in the inventory. A link missing from `bandwidth` is not metered.
    """

    cpus: dict[str, float]
    memory: dict[str, float]
    devices: dict[str, str | None]
    bandwidth: dict[str, float] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, cluster: Cluster) -> RoomLedger:
        """The room a snapshot leaves: its machines less what its allocations hold, its devices less
        the held, failed and drained ones, its links less the allocations' traffic (a machine's own
        uplink, and the path to each remote device it holds, split evenly, as `FreeState` counts it)."""
        cpus = {m.name: m.cpus for m in cluster.machines}
        memory = {m.name: m.memory_gb for m in cluster.machines}
        devices: dict[str, str | None] = {
            d.id: None if d.health == DEVICE_HEALTHY else f"is {d.health}" for d in cluster.devices}
        bandwidth = {lk.id: lk.gbps for lk in cluster.links}
        by_id = cluster.device_by_id
        for a in cluster.allocations:
            cpus[a.machine] -= a.cpus
            memory[a.machine] -= a.memory_gb
            for d in a.devices:
                devices[d] = "is already held"
            bandwidth[cluster.uplink(a.machine)] -= a.network_gbps
            if a.network_gbps <= 0:
                continue
            remote = [by_id[d].location for d in a.devices if by_id[d].location != a.machine]
            for loc in remote:
                for lk in cluster.path(a.machine, loc)[1:]:
                    bandwidth[lk] -= a.network_gbps / len(remote)
        return cls(cpus, memory, devices, bandwidth)

    def cpus_left(self, machine: str) -> float | None:
        return self.cpus.get(machine)

    def memory_left(self, machine: str) -> float:
        return self.memory[machine]

    def device_problem(self, device_id: str) -> str | None:
        return self.devices.get(device_id, "is not in the inventory")

    def link_left(self, link: str) -> float:
        return self.bandwidth.get(link, math.inf)

    def link_down(self, link: str) -> bool:
        return link in self.down

    def take(self, p: JobPlacement) -> None:
        """Subtract an accepted placement (checked with `over_commit` first): its cpus and memory, its
        devices (held from now on), its traffic on the metered links of their paths."""
        for t in p.tasks:
            self.cpus[t.machine] -= t.cpus
            self.memory[t.machine] -= t.memory_gb
            for g in t.devices:
                self.devices[g.id] = "is already held"
                for lk in g.path:
                    if lk in self.bandwidth:
                        self.bandwidth[lk] -= g.network_gbps
