"""The free resources of one round, as arrays, with reservations that can be rolled back.

A policy copies what it needs from the immutable snapshot into a `FreeState` and reserves from it
as it decides. Every reservation goes into the job's `Reservations` (a `Journal`, or a flow round's
job state) so a job that fails its gang check gives back exactly what it took. Within a round, this is where
"never over-commit" holds: every `take_*` checks capacity with `commit.exceeds` (the rule the
simulator's and the controller's re-check share) and refuses rather than going negative.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from typing import Any, Protocol, cast

import numpy as np
from numpy.typing import NDArray

from disagg.model import DEVICE_KINDS, Cluster, DeviceKind
from disagg.model.states import DEVICE_HEALTHY
from disagg.placement.commit import EPS, exceeds
from disagg.placement.decisions import DeviceGrant
from disagg.placement.running import AllocationColumns, allocation_columns, forget_kept_allocations

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def column(items: Sequence[object], name: str, dtype: type[np.generic] = np.float64) -> NDArray[Any]:
    """One attribute (dotted names reach further) of every item, as an array: one pass, no Python
    loop. Rounds read many columns off thousands of jobs, devices or allocations."""
    return np.fromiter(map(attrgetter(name), items), dtype=dtype, count=len(items))


class FloatView(Protocol):
    """Scalar access to a float64 array as plain floats (a memoryview of it)."""

    def __getitem__(self, i: int, /) -> float: ...

    def __setitem__(self, i: int, value: float, /) -> None: ...


def _float_view(array: FloatArray) -> FloatView:
    return cast(FloatView, memoryview(cast(Any, array)))


class Offers:
    """Machines a flow offers to tasks of one size: [machine, tasks left] pairs, cheapest first, and
    where the first pair with tasks left is (the front only moves forward); `end`: how many pairs (the
    list is never grown or shrunk: read once, not at each task)."""

    __slots__ = ("end", "entries", "start")

    def __init__(self, entries: list[list[int]]) -> None:
        self.entries = entries
        self.start = 0
        self.end = len(entries)


class Reservations(Protocol):
    """What one job took this round, to give back if its gang fails: a `Journal`, or a flow round's
    job state (which keeps the same lists itself, one object fewer per job)."""

    taken_cpu: list[tuple[int, float, float]]
    taken_devices: list[int]
    taken_traffic: list[tuple[tuple[int, ...], float]]


@dataclass(slots=True)
class Journal:
    """What one job took this round, to give back if its gang fails."""

    taken_cpu: list[tuple[int, float, float]] = field(default_factory=list)
    taken_devices: list[int] = field(default_factory=list)
    taken_traffic: list[tuple[tuple[int, ...], float]] = field(default_factory=list)


def _kind_codes(devices: Sequence[Any], kinds: tuple[DeviceKind, ...]) -> IntArray:
    """Each device's kind as its place in `kinds`. One kind in the whole cluster (the usual case): its
    code for every device, without a lookup each."""
    kind_code = {k: i for i, k in enumerate(kinds)}
    present = set(map(attrgetter("kind"), devices))
    if len(present) == 1:
        return np.full(len(devices), kind_code[present.pop()], dtype=np.int64)
    return np.fromiter(map(kind_code.__getitem__, map(attrgetter("kind"), devices)), dtype=np.int64,
                       count=len(devices))


@dataclass(frozen=True)
class InventoryArrays:
    """What a round's free state reads off the inventory alone (machines, pools, devices, their health
    and the down links), none of it off what runs: the same from one round to the next until the
    inventory changes. Read-only arrays, shared by every `FreeState` built on that inventory."""

    n_machines: int
    cpu_total: FloatArray
    mem_total: FloatArray
    loc_rack: IntArray
    rack_of: list[int]
    n_racks: int
    link_cap: FloatArray
    kind_codes: IntArray
    one_kind: bool
    dev_loc: IntArray
    dev_id: list[str]
    dev_index: dict[str, int]
    #: Devices a round may offer before anything runs: healthy, and not behind a down link.
    healthy: NDArray[np.bool_]
    #: The kind codes (`kind_codes`) some device has: a round builds empty arrays for the others at once.
    codes_present: frozenset[int] = frozenset()
    #: Each location's index by name (machines first, in order): `Cluster.location_index`, which each
    #: round's snapshot would build again (its cached properties are its own).
    loc_index: dict[str, int] = field(default_factory=dict)
    #: The link names (`FreeState.link_names`), once a round has named them: [] until then, else [names].
    _link_names: list[list[str]] = field(default_factory=list)
    #: The links' indices by name (`FreeState.link_index`), once a round has asked: [] until then.
    _link_index: list[dict[str, int]] = field(default_factory=list)
    #: Per kind, the models of its devices (`FreeState._models_of`), once a round has asked.
    models: dict[str, list[str]] = field(default_factory=dict)
    #: Per request shape, how many of its tasks the machines take were nothing running
    #: (`FreeState.idle_local_fit`), as rounds ask (at most IDLE_FIT_KEPT shapes: a tenant's distinct
    #: requests are theirs to choose).
    idle_fit: dict[tuple[object, ...], int] = field(default_factory=dict)
    #: Per rack, which locations share it and every location with those first (`FreeState._same_rack`),
    #: as rounds ask: the racks' locations are the inventory's.
    racks: dict[int, tuple[NDArray[np.bool_], IntArray]] = field(default_factory=dict)
    #: Per kind, each device's grant as a local device (by device index; None until first granted), and
    #: which are made.
    _local_grants: dict[str, tuple[list[DeviceGrant | None], NDArray[np.bool_]]] = field(default_factory=dict)

    def link_names(self, cluster: Cluster) -> list[str]:
        """Link names by index: the uplink of each location, then of each rack (of `cluster`, a snapshot
        of this inventory: its locations and racks are the inventory's). Made when a round first names
        a link (only remote grants do) and kept with the inventory: 12,800 names at 12,500 machines, the
        same in every round on it."""
        if not self._link_names:
            self._link_names.append([f"up:{x}" for x in cluster.locations] + [f"rack:{r}" for r in cluster.racks])
        return self._link_names[0]

    def link_index(self, cluster: Cluster) -> dict[str, int]:
        """`link_names` by name (an NA round's remote grants look their links up by name), kept likewise."""
        if not self._link_index:
            self._link_index.append({name: i for i, name in enumerate(self.link_names(cluster))})
        return self._link_index[0]

    def local_grants(self, kind: str, devices: IntArray, at: list[int], locations: Sequence[str]
                     ) -> tuple[DeviceGrant, ...]:
        """The grants of `devices` (indexes; `at`: the same as a list) as local devices of `kind`. A
        local grant says only which device, of what kind, where: the same in every round, so each is
        made the first time its device is granted and handed out again by later rounds on this inventory
        (never changed: `DeviceGrant`), instead of tens of thousands made anew each round and walked by
        the collector at its end."""
        kept = self._local_grants.get(kind)
        if kept is None:
            kept = self._local_grants[kind] = ([None] * len(self.dev_id), np.zeros(len(self.dev_id), dtype=bool))
        grants, made = kept
        if not made[devices].all():
            new = devices[~made[devices]]  # (distinct: a round grants a device once)
            at_new = new.tolist()
            made_now = map(DeviceGrant, map(self.dev_id.__getitem__, at_new), itertools.repeat(kind),
                           itertools.repeat(False), map(locations.__getitem__, self.dev_loc[new].tolist()))
            for d, grant in zip(at_new, made_now, strict=True):
                grants[d] = grant
            made[new] = True
        return cast(tuple[DeviceGrant, ...], tuple(map(grants.__getitem__, at)))


#: How many request shapes' idle fits an inventory keeps (`InventoryArrays.idle_fit`).
IDLE_FIT_KEPT = 4096


#: The last inventory's arrays, with the parts of the snapshot they were read from (compared by identity:
#: the controller's kept inventory and the simulator's snapshots share these tuples from round to round).
_kept_inventory: list[tuple[tuple[object, ...], InventoryArrays]] = []


def inventory_arrays(cluster: Cluster) -> InventoryArrays:
    """`read_inventory_arrays` of this snapshot's inventory, kept for the next snapshot of the same one.
    At 12,500 machines and 50,000 devices reading it is most of building a round's free state (a pass
    over every device per attribute), and a controller's or a simulator's rounds share one inventory
    for as long as no device changes health. Only immutable parts are compared (tuples of frozen
    records, by identity; the rack uplink and the down links, by value)."""
    parts: tuple[object, ...] = (cluster.machines, cluster.pools, cluster.devices)
    rest = (cluster.rack_uplink_gbps, cluster.down_links)
    if _kept_inventory:
        kept_parts, kept = _kept_inventory[0]
        if all(a is b for a, b in zip(kept_parts[:3], parts, strict=True)) and kept_parts[3:] == rest:
            return kept
    arrays = read_inventory_arrays(cluster)
    if all(isinstance(p, tuple) for p in parts):
        _kept_inventory[:] = [(parts + rest, arrays)]
    return arrays


def forget_kept_inventory() -> None:
    """Drop the kept inventory arrays, so that the next round reads its inventory afresh: what a
    controller's first round, or its first after a device changes health, pays (`bench placement`
    reports it as `cold_round_cpu_s`), and its allocations' columns (read with the inventory's indexes)."""
    _kept_inventory.clear()
    forget_kept_allocations()


def read_inventory_arrays(cluster: Cluster) -> InventoryArrays:
    """One pass per attribute over machines and devices, with map/attrgetter (no Python loop)."""
    machines, devices = cluster.machines, cluster.devices
    n_dev = len(devices)
    rack_index = {r: i for i, r in enumerate(cluster.racks)}
    loc_rack = np.fromiter(map(rack_index.__getitem__, cluster.location_rack), dtype=np.int64,
                           count=len(cluster.locations))
    link_cap = np.concatenate([column(machines, "uplink_gbps"), column(cluster.pools, "uplink_gbps"),
                               np.full(len(rack_index), cluster.rack_uplink_gbps, dtype=np.float64)])
    kinds = _kind_codes(devices, DEVICE_KINDS)
    loc_index = cluster.location_index
    healths = set(map(attrgetter("health"), devices))
    healthy = (np.ones(n_dev, dtype=bool) if healths <= {DEVICE_HEALTHY} else
               np.fromiter(map(DEVICE_HEALTHY.__eq__, map(attrgetter("health"), devices)), dtype=bool, count=n_dev))
    if cluster.down_links:  # behind a down link: unreachable, whatever the snapshot's word for it
        behind = cluster.reach.behind
        healthy &= ~np.fromiter(map(behind.__contains__, map(attrgetter("location"), devices)), dtype=bool,
                                count=n_dev)
    arrays = InventoryArrays(
        n_machines=len(machines), cpu_total=column(machines, "cpus"), mem_total=column(machines, "memory_gb"),
        loc_rack=loc_rack, rack_of=loc_rack.tolist(), n_racks=len(rack_index), link_cap=link_cap,
        kind_codes=kinds, one_kind=bool(n_dev) and bool((kinds == kinds[0]).all()),
        dev_loc=np.fromiter(map(loc_index.__getitem__, map(attrgetter("location"), devices)), dtype=np.int64,
                            count=n_dev),
        dev_id=(ids := list(map(attrgetter("id"), devices))), dev_index=dict(zip(ids, range(n_dev), strict=True)),
        healthy=healthy, loc_index=loc_index, codes_present=frozenset(np.unique(kinds).tolist()))
    for a in (arrays.cpu_total, arrays.mem_total, arrays.loc_rack, arrays.link_cap, arrays.kind_codes,
              arrays.dev_loc, arrays.healthy):
        a.flags.writeable = False  # shared between rounds: a write would leak into the next one
    return arrays


class FreeState:
    """Mutable free capacity derived from a snapshot: cpus, memory, devices, link bandwidth."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        inv = inventory_arrays(cluster)
        self.inventory = inv
        n_loc = len(cluster.locations)
        self.n_machines = inv.n_machines
        self.cpu_total: FloatArray = inv.cpu_total
        self.mem_total: FloatArray = inv.mem_total
        self.cpu: FloatArray = inv.cpu_total.copy()
        self.mem: FloatArray = inv.mem_total.copy()
        # Scalar access to the same memory (the arrays are never replaced, only written in place).
        self._cpu_view = _float_view(self.cpu)
        self._mem_view = _float_view(self.mem)
        # Racks and links: links are ordered [uplink of each location..., uplink of each rack...].
        self.loc_rack: IntArray = inv.loc_rack
        self.n_racks = inv.n_racks
        #: `loc_rack` as a list: `path` reads it per device, where numpy's scalar reads cost several times more.
        self._rack_of: list[int] = inv.rack_of
        self.link_cap: FloatArray = inv.link_cap
        self.link_used: FloatArray = np.zeros(len(self.link_cap), dtype=np.float64)
        # Scalar access to them as for cpus and memory: the decoders read a path's few links at a time.
        self._used_view = _float_view(self.link_used)
        self._cap_view = _float_view(inv.link_cap)
        # Devices: per kind, the free devices sorted by location in one array; location `loc` owns the
        # segment slots[start[loc] : start[loc] + size[loc]], and its first free_count[loc] entries are
        # the free ones (a stack: take from the top, give back on top).
        # Every kind gets (possibly empty) arrays, so a request for a kind the cluster lacks finds none.
        self.kinds: tuple[DeviceKind, ...] = DEVICE_KINDS
        # What runs, as columns (carried over from the last snapshot's, for the allocations it shares with this one).
        running = (allocation_columns(cluster.allocations, inv.loc_index, inv.dev_index) if cluster.allocations
                   else None)
        kinds = inv.kind_codes
        #: Whether every device is of one kind (`_models_of` then reads the models straight off the devices).
        self._one_kind = inv.one_kind
        self.dev_loc: IntArray = inv.dev_loc
        #: Every device's id, by index: read in the inventory's one pass over the devices, rather than off
        #: each device granted (a round grants tens of thousands, by then scattered out of the cache).
        self.dev_id: list[str] = inv.dev_id
        self._kind_codes = kinds
        #: Per kind, the models of its devices: of the inventory alone, kept with it (a pass over every device).
        self._models: dict[str, list[str]] = inv.models
        usable = inv.healthy.copy()
        self._healthy = inv.healthy
        if running is not None and len(running.dev):
            # (Devices the inventory does not list are held by allocations it no longer knows of: -1.)
            usable[running.dev[running.dev >= 0]] = False
        self.slots: dict[str, IntArray] = {}
        self.start: dict[str, IntArray] = {}
        self.free_count: dict[str, IntArray] = {}
        self.size: dict[str, IntArray] = {}
        self._stack_devices(inv, usable, n_loc)
        #: The kinds some machine has a free device of when the round begins (a round only takes them):
        #: for every other kind `local_free` is 0 on every machine all round, so what it would add to a
        #: machine's columns (a column of zeros, a term of 0) is left out where that changes nothing.
        self.local_kinds: tuple[DeviceKind, ...] = tuple(k for k in self.kinds
                                                         if self.free_count[k][:self.n_machines].any())
        if running is not None:
            self._apply_allocations(running)
        if cluster.down_links:
            self._cut_off()
        #: Bumped whenever free devices or link usage change; what `reachable` and `machines_with_local`
        #: cached under one version stays valid (cpu and memory do not enter them).
        self.version = 0
        #: How many times `take_traffic` took traffic (a journal holds traffic of this round only then).
        self.traffic_takes = 0
        self._cached_version = -1
        self._reach: dict[tuple[str, int, float, str | None], int] = {}
        self._local: dict[tuple[object, ...], tuple[NDArray[np.bool_], IntArray]] = {}
        #: `_same_rack` by rack: of the inventory alone, kept with it.
        self._racks: dict[int, tuple[NDArray[np.bool_], IntArray]] = inv.racks
        #: `idle_local_fit` by shape: of the inventory alone (total cpus, memory, healthy devices), kept with it.
        self._idle_fit: dict[tuple[object, ...], int] = inv.idle_fit

    def _stack_devices(self, inv: InventoryArrays, usable: NDArray[np.bool_], n_loc: int) -> None:
        """Per kind, the `usable` devices as stacks by location (`slots`, `start`, `free_count`, `size`)."""
        kinds = inv.kind_codes
        for code, k in enumerate(self.kinds):
            if code not in inv.codes_present:  # (no device of the kind at all: the same empty arrays, at once)
                self.slots[k] = np.zeros(0, dtype=np.int64)
                self.start[k] = np.zeros(n_loc, dtype=np.int64)
                self.free_count[k] = np.zeros(n_loc, dtype=np.int64)
                self.size[k] = np.zeros(n_loc, dtype=np.int64)
                continue
            idx = np.nonzero((kinds == code) & usable)[0]
            idx = idx[np.argsort(self.dev_loc[idx], kind="stable")]
            counts = np.bincount(self.dev_loc[idx], minlength=n_loc).astype(np.int64)
            self.slots[k] = idx.astype(np.int64)
            self.start[k] = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            self.free_count[k] = counts
            self.size[k] = counts.copy()

    def _apply_allocations(self, running: AllocationColumns) -> None:
        """Subtract what already runs: cpus and memory per machine, and its traffic on the links
        (the machine's uplink, and the path to each remote device it holds, split evenly)."""
        where = running.machine
        np.subtract.at(self.cpu, where, running.cpus)
        np.subtract.at(self.mem, where, running.mem)
        gbps = running.gbps
        np.add.at(self.link_used, where, gbps)
        # The paths' links past the machine's own uplink, each with its share, in the order the
        # allocations name them, then added at once (`add.at` adds in that order: the same sums as one
        # `+=` each, which cost a numpy scalar write per link and a snapshot holds hundreds).
        moving = np.flatnonzero(gbps > 0)
        devices, per_allocation = running.devices_of(moving)
        if len(devices):
            self._add_remote_traffic(running, moving, devices, per_allocation)

    def _add_remote_traffic(self, running: AllocationColumns, moving: IntArray, devices: IntArray,
                            per_allocation: IntArray) -> None:
        """The links past a machine's uplink to each remote device its allocations hold, each device's
        path carrying an even share of the allocation's traffic (`moving`: the allocations with traffic,
        `devices`: their devices, flat, `per_allocation` of them each). As arrays, device by device and
        link by link in the order the allocations name them (a loop over a snapshot's hundreds of
        allocations with remote devices was most of building a simulator round's state)."""
        where, gbps = running.machine, running.gbps
        inv = self.inventory
        owner = np.repeat(np.arange(len(moving)), per_allocation)  # per device, its allocation in `moving`
        if (devices < 0).any():  # traffic to a device the inventory does not list: as a lookup by its id says
            held = running.allocations[int(moving[owner[np.argmax(devices < 0)]])].devices
            raise KeyError(next(d for d in held if d not in inv.dev_index))
        # Each device's location off the inventory's arrays: what the snapshot's `device_by_id` and its
        # location's index say (both are the inventory's, the last of a repeated id), without a record each.
        dst = inv.dev_loc[devices]
        src = where[moving][owner]
        remote = dst != src
        if not remote.any():
            return
        n_remote = np.bincount(owner[remote], minlength=len(moving))
        share = (gbps[moving] / np.maximum(n_remote, 1))[owner[remote]]
        src, dst = src[remote], dst[remote]
        # A path past the machine's uplink: the device's uplink in its rack, else both racks' then its.
        rack = self.loc_rack
        same = rack[src] == rack[dst]
        n_links = np.where(same, 1, 3)
        starts = np.cumsum(n_links) - n_links
        links = np.empty(int(n_links.sum()), dtype=np.int64)
        n_loc = len(rack)
        links[starts] = np.where(same, dst, n_loc + rack[src])
        cross = starts[~same]
        links[cross + 1] = n_loc + rack[dst[~same]]
        links[cross + 2] = dst[~same]
        np.add.at(self.link_used, links, np.repeat(share, n_links))

    def _cut_off(self) -> None:
        """A machine behind a down link offers nothing: no task lands there; with its devices (left out
        above) nothing behind the link is used, so no path through it is ever offered (`Cluster.reach`)."""
        behind = self.cluster.reach.behind
        for i, m in enumerate(self.cluster.machines):
            if m.name in behind:
                self.cpu[i] = self.mem[i] = 0.0

    @cached_property
    def all_machines(self) -> IntArray:
        """Every machine's index, ascending (read-only): what a cost model that allows a task every
        machine answers, made once a round rather than at each of the decoder's repairs (hundreds)."""
        out = np.arange(self.n_machines)
        out.flags.writeable = False
        return out

    # -- paths and loads ---------------------------------------------------------------------------

    @cached_property
    def link_names(self) -> list[str]:
        """Link names by index: the uplink of each location, then of each rack. Built on first use
        (only remote grants name links)."""
        return self.inventory.link_names(self.cluster)

    @cached_property
    def link_index(self) -> dict[str, int]:
        """Each link's index by name (kept with the inventory, as the names are)."""
        return self.inventory.link_index(self.cluster)

    def path(self, src: int, dst: int) -> tuple[int, ...]:
        """Link indices between two locations (same as Cluster.path, by index)."""
        if src == dst:
            return ()
        rack_of = self._rack_of
        if rack_of[src] == rack_of[dst]:
            return (src, dst)
        return (src, len(rack_of) + rack_of[src], len(rack_of) + rack_of[dst], dst)

    def load(self, links: tuple[int, ...] | list[int]) -> float:
        """Utilisation (0..1+) of the busiest link among `links`."""
        if not links:
            return 0.0
        used, cap = self._used_view, self._cap_view
        # A path has a few links: plain floats (the same quotients numpy takes), unless a link has no
        # capacity, where numpy's inf and nan stand (a float division would raise).
        if all(cap[link] != 0.0 for link in links):
            return max(used[link] / cap[link] for link in links)
        idx = np.fromiter(links, dtype=np.int64)
        return float(np.max(self.link_used[idx] / self.link_cap[idx]))

    def link_load(self) -> FloatArray:
        return self.link_used / self.link_cap

    def take_cpu(self, m: int, cpus: float, mem: float, journal: Reservations) -> bool:
        # Through memoryviews of the arrays, as plain floats: the decoders call this once per task,
        # and numpy's scalar reads and writes cost several times more.
        cpu, memory = self._cpu_view, self._mem_view
        free_cpu, free_mem = cpu[m], memory[m]
        if exceeds(cpus, free_cpu) or exceeds(mem, free_mem):
            return False
        cpu[m] = free_cpu - cpus
        memory[m] = free_mem - mem
        journal.taken_cpu.append((m, cpus, mem))
        return True

    def take_cpu_along(self, offered: tuple[Offers, ...], cpus: float, mem: float, journal: Reservations,
                       limit: int) -> int:
        """Take cpus and memory for one task on the first machine along `offered` (lists in turn) that
        has some left and really fits it; returns the machine, or -1 if none does among the `limit`
        offers from the front of each list. The offers are for tasks of one size, so a machine found
        too full is spent for all of them (machines only fill up within a round). (`take_cpu` inlined:
        a round's decoder calls this once per task, some 12,000 at 12,500 machines; `exceeds` too.)"""
        cpu, memory = self._cpu_view, self._mem_view
        for offers in offered:
            entries, start, end = offers.entries, offers.start, offers.end
            while start < end and entries[start][1] == 0:
                start += 1
            offers.start = start
            if start < end and limit > 0:
                # The front offer (it has tasks left) first: it fits most tasks, and then no scan is set up.
                offer = entries[start]
                m = offer[0]
                free_cpu, free_mem = cpu[m], memory[m]
                if not (cpus > free_cpu + EPS or mem > free_mem + EPS):
                    cpu[m] = free_cpu - cpus
                    memory[m] = free_mem - mem
                    journal.taken_cpu.append((m, cpus, mem))
                    offer[1] -= 1
                    return m
                offer[1] = 0
            stop = start + limit
            for k in range(start + 1, stop if stop < end else end):  # (`min` without its call)
                offer = entries[k]
                if offer[1] == 0:
                    continue
                m = offer[0]
                free_cpu, free_mem = cpu[m], memory[m]
                if cpus > free_cpu + EPS or mem > free_mem + EPS:  # (`exceeds`, inlined)
                    offer[1] = 0
                    continue
                cpu[m] = free_cpu - cpus
                memory[m] = free_mem - mem
                journal.taken_cpu.append((m, cpus, mem))
                offer[1] -= 1
                return m
        return -1

    def take_device(self, kind: str, loc: int, model: str | None, journal: Reservations) -> int | None:
        """Take one free device of `kind` (and `model`, if given) at `loc`; None if there is none."""
        counts = self.free_count.get(kind)
        if counts is None or counts[loc] == 0:
            return None
        slots = self.slots[kind]
        first = int(self.start[kind][loc])
        top = first + int(counts[loc]) - 1
        if model is not None:
            devices = self.cluster.devices
            pos = next((p for p in range(top, first - 1, -1) if devices[slots[p]].model == model), -1)
            if pos < 0:
                return None
            slots[pos], slots[top] = slots[top], slots[pos]
        dev = int(slots[top])
        counts[loc] -= 1
        journal.taken_devices.append(dev)
        self.version += 1
        return dev

    def free_devices(self, kind: str, loc: int) -> IntArray:
        """The free devices of a kind at a location (indices into cluster.devices)."""
        if kind not in self.slots:
            return np.zeros(0, dtype=np.int64)
        first = int(self.start[kind][loc])
        return self.slots[kind][first:first + int(self.free_count[kind][loc])]

    def take_traffic(self, links: tuple[int, ...], gbps: float, journal: Reservations) -> bool:
        if not links or gbps <= 0:
            return True
        used, cap = self._used_view, self._cap_view
        for link in links:
            if used[link] + gbps > cap[link] + EPS:  # (`exceeds`, inlined: a call per link of every remote try)
                return False
        for link in links:
            used[link] += gbps
        journal.taken_traffic.append((links, gbps))
        self.version += 1
        self.traffic_takes += 1
        return True

    def fits_traffic(self, links: tuple[int, ...], gbps: float) -> bool:
        """Whether `take_traffic` would take `gbps` on every link of `links` (without taking it)."""
        if gbps <= 0:
            return True
        used, cap = self._used_view, self._cap_view
        for link in links:  # noqa: SIM110 - `exceeds` inlined in a loop, not `all` over a generator (NaN: fits)
            if used[link] + gbps > cap[link] + EPS:
                return False
        return True

    def load_with(self, links: tuple[int, ...], gbps: float) -> float:
        """`load(links)` as it reads once `take_traffic(links, gbps, ...)` has taken it, without
        taking it: the NA decoder prices each path it tries with its own traffic on it, and most
        tries fail (taking and giving back the traffic of each cost more than the check itself)."""
        if gbps <= 0 or not links:
            return self.load(links)
        used, cap = self._used_view, self._cap_view
        if all(cap[link] != 0.0 for link in links):
            return max((used[link] + gbps) / cap[link] for link in links)
        idx = np.fromiter(links, dtype=np.int64)
        return float(np.max((self.link_used[idx] + gbps) / self.link_cap[idx]))

    def trial_loads(self, own: int, locs: IntArray, gbps: float) -> tuple[NDArray[np.bool_], FloatArray] | None:
        """For a task on `own` and a device at each of `locs` (other locations): whether every link of
        the path has `gbps` of headroom (`fits_traffic`) and the busiest link's load with it on
        (`load_with`), for all of them in one pass (the same floats). None where that pass does not
        stand for them: no traffic (gbps ≤ 0) or a link with no capacity (`load`'s numpy path)."""
        trial = self._trial(own, locs, gbps)
        if trial is None:
            return None
        fits, rack_loc, cross = trial
        used, cap = self.link_used, self.link_cap
        used_at, cap_at = self._used_view, self._cap_view
        rack_own = len(self._rack_of) + self._rack_of[own]
        load = np.maximum((used_at[own] + gbps) / cap_at[own], (used[locs] + gbps) / cap[locs])
        if cross.any():
            far = rack_loc[cross]
            load[cross] = np.maximum(np.maximum(load[cross], (used_at[rack_own] + gbps) / cap_at[rack_own]),
                                     (used[far] + gbps) / cap[far])
        return fits, load

    def trial_fits(self, own: int, locs: IntArray, gbps: float) -> NDArray[np.bool_] | None:
        """`trial_loads`'s first half, whether each path fits, without the loads: for a walk whose check
        refuses every path (it prices none)."""
        trial = self._trial(own, locs, gbps)
        return None if trial is None else trial[0]

    def _trial(self, own: int, locs: IntArray, gbps: float
               ) -> tuple[NDArray[np.bool_], IntArray, NDArray[np.bool_]] | None:
        """`trial_fits`, with each path's far rack link and which paths cross racks (`trial_loads` reads
        them again)."""
        if gbps <= 0:
            return None
        n_loc = len(self._rack_of)
        used, cap = self.link_used, self.link_cap
        rack_own = n_loc + self._rack_of[own]
        rack_loc = n_loc + self.loc_rack[locs]
        cross = rack_loc != rack_own
        if not self._no_zero_cap and not cap[np.concatenate(([own, rack_own], locs, rack_loc[cross]))].all():
            return None
        # The shared links' sums as plain floats (the same sums and comparisons as numpy's scalars).
        used_at, cap_at = self._used_view, self._cap_view
        fits = used[locs] + gbps <= cap[locs] + EPS
        fits &= not exceeds(used_at[own] + gbps, cap_at[own])
        if cross.any():
            far = rack_loc[cross]
            fits[cross] &= (used[far] + gbps <= cap[far] + EPS) & (not exceeds(used_at[rack_own] + gbps,
                                                                                 cap_at[rack_own]))
        return fits, rack_loc, cross

    @cached_property
    def _no_zero_cap(self) -> bool:
        """Whether every link has some capacity (`trial_loads` then need not look)."""
        return bool(self.link_cap.all())

    def retrace_paths(self, own: int, locs: IntArray, gbps: float) -> int:
        """`retrace_traffic` on the paths from `own` to each of `locs`, one after another, as far as the
        first whose retrace moves a link the paths share (`own`'s uplink, a rack's: the paths after it
        then see other sums); returns how many it retraced, that one included. One pass for those
        before it: each moves only its own location's uplink, which no other of these paths crosses."""
        n = len(locs)
        if gbps <= 0 or n == 0:
            return n
        n_loc = len(self._rack_of)
        used = self.link_used
        # A shared link moves, if at all, the first time it is retraced: the task's uplink on the first
        # path, its rack's on the first path across racks, another rack's on the first path to it. (Racks'
        # uplinks tested all at once, first: most often none moves, and the paths' racks are not read.)
        stop = n
        at_own = self._used_view[own]
        if (at_own + gbps) - gbps != at_own:
            stop = 0
        else:
            rack_used = used[n_loc:]
            rack_moves = (rack_used + gbps) - gbps != rack_used
            if rack_moves.any():
                racks = self.loc_rack[locs]
                cross = racks != self._rack_of[own]
                hit = np.flatnonzero(cross if rack_moves[self._rack_of[own]] else cross & rack_moves[racks])
                if len(hit):
                    stop = int(hit[0])
        ahead = locs[:stop]
        was = used[ahead]
        back = (was + gbps) - gbps
        if (back != was).any():
            used[ahead] = back
            self.version += 1
        if stop == n:
            return n
        self.retrace_traffic(self.path(own, int(locs[stop])), gbps)
        return stop + 1

    def retrace_traffic(self, links: tuple[int, ...], gbps: float) -> bool:
        """Leave the links as `take_traffic` followed by `undo_last_traffic` leaves them, for a path the
        decoder tried and did not take: x + g − g need not be x in floats, and every later check reads
        these sums, so a try costs the same rounding whether or not its traffic was really taken.
        (Cached reach is dropped only where a sum did move.) Returns whether a link but the path's last
        moved: on a path from a machine those are the ones its other paths share (its uplink, racks')."""
        if gbps <= 0:
            return False
        used = self._used_view
        shared = False
        last = len(links) - 1
        for at, link in enumerate(links):
            was = used[link]
            back = (was + gbps) - gbps
            if back != was:
                used[link] = back
                self.version += 1
                shared |= at < last
        return shared

    def undo_last_traffic(self, journal: Reservations) -> None:
        """Give back the most recent `take_traffic` of this journal (a device that then fell through)."""
        links, gbps = journal.taken_traffic.pop()
        used = self._used_view
        for link in links:
            used[link] -= gbps
        self.version += 1

    def free_by_model(self, kind: str) -> tuple[list[str], IntArray]:
        """The models of free devices of a kind and an (locations × models) array of free counts."""
        n_loc = len(self.loc_rack)
        if kind not in self.slots:
            return ["generic"], np.zeros((n_loc, 1), dtype=np.int64)
        devices = self.cluster.devices
        models = self._models_of(kind)
        if len(models) == 1:
            return models, self.free_count[kind].reshape(-1, 1).copy()
        col = {m: i for i, m in enumerate(models)}
        out = np.zeros((n_loc, len(models)), dtype=np.int64)
        for loc in np.nonzero(self.free_count[kind])[0]:
            for d in self.free_devices(kind, int(loc)):
                out[loc, col[devices[d].model]] += 1
        return models, out

    def _models_of(self, kind: str) -> list[str]:
        """The models of a kind's devices (free or not), sorted."""
        found = self._models.get(kind)
        if found is None:
            devices = self.cluster.devices
            code = self.kinds.index(cast(DeviceKind, kind))
            if self._one_kind and len(devices) and self._kind_codes[0] == code:  # every device is of the kind
                found = sorted(set(map(attrgetter("model"), devices)))
            else:
                at = np.nonzero(self._kind_codes == code)[0].tolist()
                found = sorted(set(map(attrgetter("model"), map(devices.__getitem__, at))))
            self._models[kind] = found
        return found

    def rollback(self, journal: Reservations) -> None:
        """Give back everything in the journal (a failed gang). `version` moves only where devices or
        traffic come back: what is cached under it (`reachable`, `machines_with_local`, a cost model's
        supply) reads no cpus or memory, and most failed jobs of a round give back only those (a job
        the device phase fails holds its phase-1 cpus; thousands a simulated run, each of which made
        the next explanation's `reachable` work its answer out anew)."""
        if not (journal.taken_cpu or journal.taken_devices or journal.taken_traffic):
            return
        moves = bool(journal.taken_devices or journal.taken_traffic)
        # Through the memoryviews, as plain floats (the same sums): a failed job gives its cpus back here,
        # thousands of times a simulated run, and numpy's scalar reads and writes cost several times more.
        cpu, memory = self._cpu_view, self._mem_view
        for m, cpus, mem in journal.taken_cpu:
            cpu[m] += cpus
            memory[m] += mem
        devices = self.cluster.devices
        for dev in reversed(journal.taken_devices):
            kind = devices[dev].kind
            loc = int(self.dev_loc[dev])
            # The device sits in the taken part of its location's segment; swap it to the top of the
            # free part.
            pos = int(self.start[kind][loc] + self.free_count[kind][loc])
            end = int(self.start[kind][loc] + self.size[kind][loc])
            slots = self.slots[kind]
            here = int(np.nonzero(slots[pos:end] == dev)[0][0]) + pos
            slots[here], slots[pos] = slots[pos], slots[here]
            self.free_count[kind][loc] += 1
        for links, gbps in journal.taken_traffic:
            self.link_used[np.fromiter(links, dtype=np.int64)] -= gbps
        journal.taken_cpu.clear()
        journal.taken_devices.clear()
        journal.taken_traffic.clear()
        if moves:
            self.version += 1

    # -- summaries for explanations ------------------------------------------------------------------

    def total_free(self, kind: str, model: str | None = None) -> int:
        if kind not in self.free_count:
            return 0
        if model is None:
            return int(self.free_count[kind].sum())
        devices = self.cluster.devices
        return sum(1 for loc in np.nonzero(self.free_count[kind])[0]
                   for d in self.free_devices(kind, int(loc)) if devices[d].model == model)

    def reachable(self, kind: str, own: int, gbps: float, model: str | None = None) -> int:
        """Free devices of `kind` (of `model`, if given) a task on location `own` could use: its own,
        plus remote ones whose path has `gbps` of headroom on every link."""
        self._drop_stale_caches()
        key = (kind, own, gbps, model)
        if key not in self._reach:
            self._reach[key] = self._reachable(kind, own, gbps, model)
        return self._reach[key]

    def _drop_stale_caches(self) -> None:
        """Forget what was cached about devices and links under an older `version`."""
        if self._cached_version != self.version:
            self._reach.clear()
            self._local.clear()
            self._cached_version = self.version

    def _reachable(self, kind: str, own: int, gbps: float, model: str | None) -> int:
        free = self.free_count.get(kind)
        if free is None:
            return 0
        if model is not None:
            models, counts = self.free_by_model(kind)
            free = counts[:, models.index(model)] if model in models else np.zeros_like(free)
        # (The counts at the locations within reach as a dot product with the mask: the same integer sum,
        # without gathering them first; an explanation asks this, thousands of times a simulated run.)
        return int(free[own]) + int(np.dot(free, self.remote_reach(own, gbps)))

    def reachable_from(self, kind: str, owns: IntArray, gbps: float, model: str | None = None) -> IntArray:
        """`reachable(kind, own, gbps, model)` for each of `owns` at once: per rack, the free devices at
        locations whose uplink has the headroom, so that each location's answer is its own devices, its
        rack's others, and (when its rack's uplink has the headroom too) those of the racks whose uplink
        has it, without a mask over every location per location. The same integers (sums of counts); an
        explanation asks it of up to 64 machines at a time, each of which cost a `remote_reach`."""
        free = self.free_count.get(kind)
        if free is None:
            return np.zeros(len(owns), dtype=np.int64)
        if model is not None:
            models, counts = self.free_by_model(kind)
            free = counts[:, models.index(model)] if model in models else np.zeros_like(free)
        n_loc = len(self.loc_rack)
        headroom = self.link_cap - self.link_used
        loc_ok = headroom[:n_loc] + EPS >= gbps
        rack_ok = headroom[n_loc:] + EPS >= gbps  # per rack, its uplink
        per_rack = np.zeros(self.n_racks, dtype=np.int64)
        np.add.at(per_rack, self.loc_rack, np.where(loc_ok, free, 0))
        racks = self.loc_rack[owns]
        own_free = free[owns].astype(np.int64)
        # (`remote_reach`'s own test, `headroom + EPS < gbps`, spelt as it is: a NaN headroom passes it.)
        sends = ~(headroom[owns] + EPS < gbps)
        same = per_rack[racks] - np.where(loc_ok[owns], own_free, 0)
        across = np.where(rack_ok[racks], int(per_rack[rack_ok].sum()) - per_rack[racks], 0)
        out: IntArray = own_free + np.where(sends, same + across, 0)
        return out

    def remote_reach(self, own: int, gbps: float) -> NDArray[np.bool_]:
        """Which other locations a task on `own` could use a device at: every link of the path has
        `gbps` of headroom. (One test over every link, then read per location: the decoder asks this
        for each task it repairs or explains, thousands of times a simulated run, on a few hundred links.)"""
        n_loc = len(self._rack_of)
        headroom = self.link_cap - self.link_used
        if headroom[own] + EPS < gbps:  # (spelt so: a NaN headroom passes it, and its path's other links decide)
            return np.zeros(n_loc, dtype=bool)
        ok = headroom + EPS >= gbps
        reach: NDArray[np.bool_]
        if ok[n_loc + self._rack_of[own]]:  # its rack's uplink has it: any location whose rack's uplink has it too
            reach = ok[:n_loc] & ok[n_loc:][self.loc_rack]
        else:  # only its own rack
            reach = ok[:n_loc] & self._same_rack(own)[0]
        reach[own] = False
        return reach

    def reach_order(self, own: int, gbps: float, among: NDArray[np.bool_]) -> IntArray:
        """The locations of `among` within reach of `own` (`remote_reach`), those in its rack first, then
        the others, each in location order: the order the decoder tries them in."""
        first = self._same_rack(own)[1]
        out: IntArray = first[(among & self.remote_reach(own, gbps))[first]]
        return out

    def reach_trial(self, own: int, gbps: float, among: NDArray[np.bool_], limit: int
                    ) -> tuple[IntArray, NDArray[np.bool_] | None]:
        """`reach_order(own, gbps, among)[:limit]` and `trial_fits` of those paths, the fits from one test
        over every link, read per location and then in that order (the same comparisons on the same
        floats): a held task's walk asks both of the same locations, some thousands of times a simulated
        run, and over a few hundred links the numpy calls, not their length, are what it costs."""
        order = self.reach_order(own, gbps, among)[:limit]
        if not gbps > 0 or not self._no_zero_cap:
            return order, self.trial_fits(own, order, gbps)
        n_loc = len(self._rack_of)
        used, cap = self.link_used, self.link_cap
        same = self._same_rack(own)[0]
        rack_own = n_loc + self._rack_of[own]
        # `_trial`'s tests: numpy's on each location's uplink and far rack's, plain floats on the shared ones.
        used_at, cap_at = self._used_view, self._cap_view
        if exceeds(used_at[own] + gbps, cap_at[own]):
            return order, np.zeros(len(order), dtype=bool)
        fit = used + gbps <= cap + EPS
        if exceeds(used_at[rack_own] + gbps, cap_at[rack_own]):
            per_loc = fit[:n_loc] & same
        else:
            per_loc = fit[:n_loc] & (same | fit[n_loc:][self.loc_rack])
        fits: NDArray[np.bool_] = per_loc[order]
        return order, fits

    def _same_rack(self, own: int) -> tuple[NDArray[np.bool_], IntArray]:
        """Per rack (`own`'s), which locations share it, and every location with those first (each part in
        location order); of the inventory alone, made once per rack asked and kept with it (read-only)."""
        rack = self._rack_of[own]
        found = self._racks.get(rack)
        if found is None:
            same = self.loc_rack == rack
            order = np.concatenate([np.flatnonzero(same), np.flatnonzero(~same)])
            same.flags.writeable = False
            order.flags.writeable = False
            found = self._racks[rack] = (same, order)
        return found

    def machines_with_local(self, shape: tuple[object, ...]) -> tuple[NDArray[np.bool_], IntArray]:
        """The machines (as a mask, and ascending) whose own free devices cover one task of a request shape
        `(cpus, memory_gb, ((kind, count), ...), ((kind, model), ...))`. Cached while no device is
        taken or given back: a decoder asks once per over-filled task, and a mask over every machine
        per kind is the expensive part."""
        self._drop_stale_caches()
        key = (shape[2], shape[3])
        found = self._local.get(key)
        if found is None:
            devices = cast(tuple[tuple[str, int], ...], shape[2])
            models = dict(cast(tuple[tuple[str, str], ...], shape[3]))
            ok = np.ones(self.n_machines, dtype=bool)
            for kind, count in devices:
                ok &= self.local_free(kind, models.get(kind)) >= count
            found = self._local[key] = (ok, np.nonzero(ok)[0])
        return found

    def idle_local_fit(self, shape: tuple[object, ...]) -> int:
        """How many tasks of a request shape `(cpus, memory_gb, ((kind, count), ...), ((kind, model), ...))`
        the machines could take were nothing running: by their total cpus and memory, and with every
        device the task wants among the machine's own healthy devices (held or free). Cached per shape."""
        found = self._idle_fit.get(shape)
        if found is None:
            cpus, memory_gb = cast(float, shape[0]), cast(float, shape[1])
            models = dict(cast(tuple[tuple[str, str], ...], shape[3]))
            with np.errstate(divide="ignore", invalid="ignore"):
                fit = np.minimum(np.floor((self.cpu_total + EPS) / cpus), np.floor((self.mem_total + EPS) / memory_gb))
            for kind, count in cast(tuple[tuple[str, int], ...], shape[2]):
                fit = np.minimum(fit, self._healthy_local(kind, models.get(kind)) // count)
            if len(self._idle_fit) >= IDLE_FIT_KEPT:
                self._idle_fit.clear()
            found = self._idle_fit[shape] = int(np.maximum(fit, 0).sum())
        return found

    def _healthy_local(self, kind: str, model: str | None) -> IntArray:
        """Per machine, its own healthy devices of `kind` (of `model`), held or free."""
        mask = self._healthy & (self._kind_codes == self.kinds.index(cast(DeviceKind, kind)))
        if model is not None:
            devices = self.cluster.devices
            mask &= np.fromiter((devices[i].model == model for i in range(len(devices))), dtype=bool,
                                count=len(devices))
        counts: IntArray = np.bincount(self.dev_loc[mask], minlength=len(self.loc_rack))[: self.n_machines]
        return counts

    def local_free(self, kind: str, model: str | None = None) -> IntArray:
        """Free devices of `kind` (of `model`, if given) that sit in each machine (not pools)."""
        if kind not in self.free_count:
            return np.zeros(self.n_machines, dtype=np.int64)
        if model is None:
            return self.free_count[kind][: self.n_machines]
        models, counts = self.free_by_model(kind)
        if model not in models:
            return np.zeros(self.n_machines, dtype=np.int64)
        return counts[: self.n_machines, models.index(model)]
