"""The cluster: machines, pools, devices, links and what already runs on them.

A `Cluster` is an immutable snapshot. Policies read it; only the shell (simulator, controller)
builds a new one when the world changes. Device ids are stable: `<machine-or-pool>/<kind><index>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from operator import attrgetter
from typing import TYPE_CHECKING, Literal

from disagg.model.states import DEVICE_HEALTHY, DeviceHealth

if TYPE_CHECKING:
    from disagg.model.tenancy import Tenancy

DeviceKind = Literal["gpu", "nvme", "fpga", "memory"]
#: Disaggregable kinds in the order their placement phases run (DESIGN: gpu, then nvme, ...).
DEVICE_KINDS: tuple[DeviceKind, ...] = ("gpu", "nvme", "fpga", "memory")


def device_id(location: str, kind: str, index: int) -> str:
    """The stable id of a device: the name of where it sits, its kind and its index there."""
    return f"{location}/{kind}{index}"


@dataclass(frozen=True, slots=True)
class Device:
    """One disaggregable unit. `location` is a machine or a pool name."""

    id: str
    kind: DeviceKind
    model: str
    location: str
    index: int
    capacity: float = 1.0
    health: DeviceHealth = DEVICE_HEALTHY
    redfish_uri: str | None = None  # its ResourceBlock on a Redfish service (a cluster spec from discovery)


@dataclass(frozen=True, slots=True)
class Machine:
    """A server node: it has CPUs and memory of its own and may host devices."""

    name: str
    rack: str
    cpus: float
    memory_gb: float
    uplink_gbps: float
    redfish_uri: str | None = None  # its Compute ResourceBlock on a Redfish service


@dataclass(frozen=True, slots=True)
class Pool:
    """A set of devices with no CPU of their own (an I/O box, a PCIe/CXL chassis)."""

    name: str
    rack: str
    uplink_gbps: float


@dataclass(frozen=True, slots=True)
class Link:
    """A network edge with a bandwidth. Ids: `up:<node>` (node↔rack switch), `rack:<rack>` (rack↔spine)."""

    id: str
    gbps: float


@dataclass(frozen=True)
class Reach:
    """What the down links cut off: the one derivation every reader of link state shares (the policies'
    snapshot, the device and machine views, a waiting job's reason, the dashboard).

    The network is a tree: a location's uplink joins it to its rack's switch, a rack's link joins the
    switch to the spine. A down `up:<x>` cuts off `x` (its cpus and every device there); a down
    `rack:<r>` cuts off every location of rack `r`. Every path between two locations crosses only
    their own uplinks and their racks' links, so a path through a down link always has a cut-off end:
    offering nothing that is cut off offers no path through a down link.
    """

    down: frozenset[str] = frozenset()
    #: Each cut-off location → the down link that cuts it off (its own uplink before its rack's).
    behind: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, down: Iterable[str], location_rack: Iterable[tuple[str, str]]) -> Reach:
        """From the down links and (location, rack) of every machine and pool."""
        down = frozenset(down)
        if not down:
            return cls()
        behind = {}
        for location, rack in location_rack:
            for link in (f"up:{location}", f"rack:{rack}"):
                if link in down:
                    behind[location] = link
                    break
        return cls(down, behind)

    def reachable(self, location: str) -> bool:
        return location not in self.behind

    def link_to(self, location: str) -> str | None:
        """The down link that cuts `location` off; None when it is reachable."""
        return self.behind.get(location)


@dataclass(frozen=True, slots=True)
class Allocation:
    """Something already running: a task's share of a machine, the devices it holds, its traffic."""

    job: str
    machine: str
    cpus: float
    memory_gb: float
    devices: tuple[str, ...] = ()
    network_gbps: float = 0.0


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a cluster has, empty: enough to tell a job that can never fit from one that must wait,
    in time independent of the cluster's size (a trace or a submission checks every job)."""

    #: (cpus, memory_gb) of the machines that no other machine matches or beats in both.
    shapes: tuple[tuple[float, float], ...]
    cpus: float
    #: Devices per (kind, model) and, under model None, per kind.
    devices: dict[tuple[str, str | None], int]

    @classmethod
    def of(cls, machines: tuple[Machine, ...], devices: tuple[Device, ...]) -> Capacity:
        shapes: list[tuple[float, float]] = []
        for cpus, memory in sorted(((m.cpus, m.memory_gb) for m in machines), reverse=True):
            if not shapes or memory > shapes[-1][1]:
                shapes.append((cpus, memory))
        counts: dict[tuple[str, str | None], int] = {}
        for d in devices:
            for key in ((d.kind, d.model), (d.kind, None)):
                counts[key] = counts.get(key, 0) + 1
        return cls(tuple(shapes), sum(m.cpus for m in machines), counts)

    def fits_one(self, cpus: float, memory_gb: float) -> bool:
        """Some machine has at least these cpus and this memory."""
        return any(c >= cpus and m >= memory_gb for c, m in self.shapes)

    def count(self, kind: str, model: str | None = None) -> int:
        return self.devices.get((kind, model), 0)


@dataclass(frozen=True)
class Cluster:
    """An immutable snapshot of the inventory and its current use. `tenancy`: who holds what and
    the tenants' spec and past usage (None: a round without tenants, see `model/tenancy.py`)."""

    machines: tuple[Machine, ...]
    pools: tuple[Pool, ...] = ()
    devices: tuple[Device, ...] = ()
    rack_uplink_gbps: float = 100.0
    allocations: tuple[Allocation, ...] = ()
    tenancy: Tenancy | None = None
    #: Links that are down: what they cut off (`reach`) offers nothing (its devices are `unreachable`).
    down_links: frozenset[str] = frozenset()

    def with_tenancy(self, tenancy: Tenancy | None) -> Cluster:
        """The same snapshot with another `tenancy`. What it has worked out already (its indexes) is
        kept: none of it depends on the tenancy, and at 12,500 machines it is worth keeping."""
        return self._with_indexes(replace(self, tenancy=tenancy))

    def with_allocations(self, allocations: tuple[Allocation, ...]) -> Cluster:
        """The same inventory with other `allocations` (what runs now). Its indexes are kept, as by
        `with_tenancy`: none of them depends on what runs (a simulator's snapshot each round)."""
        return self._with_indexes(replace(self, allocations=allocations))

    def _with_indexes(self, new: Cluster) -> Cluster:
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k in _CACHED})
        return new

    @cached_property
    def reach(self) -> Reach:
        """What the down links cut off."""
        return Reach.of(self.down_links, zip(self.locations, self.location_rack, strict=True))

    @cached_property
    def machine_index(self) -> dict[str, int]:
        return {m.name: i for i, m in enumerate(self.machines)}

    @cached_property
    def device_by_id(self) -> dict[str, Device]:
        return {d.id: d for d in self.devices}

    @cached_property
    def locations(self) -> tuple[str, ...]:
        """Every place a device can sit: machines first (same order), then pools."""
        return tuple(map(attrgetter("name"), self.machines)) + tuple(map(attrgetter("name"), self.pools))

    @cached_property
    def location_index(self) -> dict[str, int]:
        return dict(zip(self.locations, range(len(self.locations)), strict=True))

    @cached_property
    def location_rack(self) -> tuple[str, ...]:
        return tuple(map(attrgetter("rack"), self.machines)) + tuple(map(attrgetter("rack"), self.pools))

    @cached_property
    def racks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.location_rack))

    def uplink(self, location: str) -> str:
        """The link id of a machine's or pool's uplink to its rack switch."""
        return f"up:{location}"

    def path(self, src: str, dst: str) -> tuple[str, ...]:
        """The links traffic between two locations crosses (empty when they are the same place)."""
        if src == dst:
            return ()
        racks = self.location_rack
        idx = self.location_index
        r_src, r_dst = racks[idx[src]], racks[idx[dst]]
        if r_src == r_dst:
            return (self.uplink(src), self.uplink(dst))
        return (self.uplink(src), f"rack:{r_src}", f"rack:{r_dst}", self.uplink(dst))

    @cached_property
    def links(self) -> tuple[Link, ...]:
        ups = [Link(self.uplink(m.name), m.uplink_gbps) for m in self.machines]
        ups += [Link(self.uplink(p.name), p.uplink_gbps) for p in self.pools]
        return tuple(ups) + tuple(Link(f"rack:{r}", self.rack_uplink_gbps) for r in self.racks)

    @cached_property
    def link_by_id(self) -> dict[str, Link]:
        return {lk.id: lk for lk in self.links}

    @cached_property
    def capacity(self) -> Capacity:
        return Capacity.of(self.machines, self.devices)


#: The snapshot's indexes, built on first use (`Cluster.with_tenancy` carries them over).
_CACHED = frozenset(k for k, v in vars(Cluster).items() if isinstance(v, cached_property))
