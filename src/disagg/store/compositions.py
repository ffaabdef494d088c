"""Compositions: slices with no job, made and unmade by their owner (a Redfish client's composed systems).

`POST /redfish/v1/Systems` asks for one machine (its Compute block) and some devices (their blocks);
`compose` checks, in one transaction, what a round's commit checks — the machine has the cpus and
memory asked for left after the live slices, each device exists, is healthy, not drained and held by
no slice — and creates a slice `composing` that holds them, owned by the tenant, with no job. The
loop composes it through the same six-operation state machine as a job's slice (attach-device,
launch-machine), and it stays `composed` until its owner decomposes it (`decompose`: to teardown).

A composed system is updatable (Redfish `AddResourceBlock` / `RemoveResourceBlock`, or a PATCH of its
blocks): `update_composition` checks, in one transaction, what `compose` checks for the devices added
(each free; a remove names a device the system holds, never its machine), writes the new placement and
sends the slice back `composed → composing`; the loop then runs the steps the update needs through the
same state machine — an attach-device for a device added; a detach-device for one removed, whose row
the update writes `started` (asked for, not yet tried: tries 0) so that a crash before or during it
resumes it — and moves it `composing → composed` again. A removed device stays held (and in the
placement) until its detach is done; the detach's effect (`DropDevice`) releases it and drops it from
the placement in one transaction. An attach of an update that fails is undone (the device detached and
dropped) and the composition is composed again as it was, its detail saying the update failed.

The Redfish service's read side is here too (`redfish_inventory`): the inventory and every live slice
(a job's or a composition), from which it draws its blocks, zones and composed systems.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection, Table, delete, func, insert, select

from disagg.model.cluster import Reach
from disagg.model.slices import PlacedDevice, PlacedTask, SlicePlacement
from disagg.model.states import (
    DECOMPOSABLE_SLICE_STATES,
    LIVE_SLICE_STATES,
    Health,
    SliceOutcome,
    SliceState,
    StepStatus,
)
from disagg.placement.usage import placement_usage
from disagg.store.base import StoreBase
from disagg.store.jobs import new_id
from disagg.store.lifecycle import hold_devices, move_slice, new_slices
from disagg.store.models import DeviceRow, JobRow, LinkRow, MachineRow, SliceRow, StepRow
from disagg.store.snapshot import live_placements, read_reach, room_left
from disagg.store.tenants import holdings_by_tenant

_machines: Table = MachineRow.__table__  # type: ignore[assignment]
_devices: Table = DeviceRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]
_links: Table = LinkRow.__table__  # type: ignore[assignment]
_jobs: Table = JobRow.__table__  # type: ignore[assignment]
_steps: Table = StepRow.__table__  # type: ignore[assignment]
#: The steps an update of a composed system runs for a device: attach it, or detach it.
ATTACH, DETACH = "attach-device", "detach-device"
#: How a composition whose last update failed (and was undone) says so (its slice's detail).
UPDATE_FAILED = "update failed"


class CompositionRefused(ValueError):
    """A composition cannot be made as asked. `in_use`: the parts someone else holds (Redfish
    `ResourceInUse`); `unknown`: parts that do not exist; the message says which and why."""

    def __init__(self, message: str, in_use: tuple[str, ...] = (), unknown: tuple[str, ...] = (),
                 exhausted: bool = False) -> None:
        super().__init__(message)
        self.in_use, self.unknown, self.exhausted = in_use, unknown, exhausted


#: `compose`'s admission check: (what each tenant holds now, what the composition would hold) → why it may
#: not (its tenant's quota and borrowing), or None.
Admit = Callable[[Mapping[str, Mapping[str, float]], Mapping[str, float]], str | None]


@dataclass(frozen=True)
class LiveSlice:
    """A slice as the Redfish service shows it: a job's (`tenant`: the job's), or a composition (no job, an
    owner, a name). `outcome` and `detail` say how a slice that left ended."""

    id: str
    job_id: str | None
    tenant: str | None
    name: str | None
    state: SliceState
    placement: SlicePlacement
    created_at: float
    outcome: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class NodeRow:
    """A machine or a pool of the inventory."""

    name: str
    kind: str  # machine | pool
    rack: str
    cpus: float
    memory_gb: float


@dataclass(frozen=True)
class DeviceInfo:
    """A device of the inventory with its health and holder."""

    id: str
    kind: str
    model: str
    location: str
    index: int
    capacity: float
    health: str
    drained: bool
    slice_id: str | None


@dataclass(frozen=True)
class Inventory:
    """Everything the Redfish service draws from, read in one transaction."""

    nodes: tuple[NodeRow, ...]
    devices: tuple[DeviceInfo, ...]
    slices: tuple[LiveSlice, ...]
    down_links: frozenset[str] = field(default_factory=frozenset)
    #: What the down links cut off (`model.cluster.Reach`): a block there is unavailable.
    reach: Reach = field(default_factory=Reach)
    #: Each link's bandwidth, Gbit/s (`up:<node>`, `rack:<rack>`): the Chassis show their uplinks' speeds.
    link_gbps: Mapping[str, float] = field(default_factory=dict)


class CompositionOps(StoreBase):
    """Composing and decomposing slices with no job, and the Redfish service's read of the inventory."""

    def compose(self, tenant: str, name: str, host: str, devices: list[str], cpus: float | None = None,
                memory_gb: float | None = None, device_gbps: float = 0.0, admit: Admit | None = None,
                most: int | None = None) -> str:
        """A composition of `host` with `devices` for `tenant`: the new slice's id (it is `composing`).

        `cpus`/`memory_gb`: the share of the machine it holds; both None: the whole machine, which must then
        be held by no other slice; one None: the same fraction of the machine as the other. `device_gbps`:
        the bandwidth each remote device reserves on every link of its path, as a job's device does. `admit`:
        the tenant's quota check, made on what every tenant holds in the same transaction; `most`: how many
        live compositions a tenant may hold. CompositionRefused naming the parts in use or unknown, the link
        without the bandwidth, or the limit (`exhausted`).
        """
        now = time.time()
        with self.write_core(urgent=True) as conn:
            if most is not None:
                _check_count(conn, tenant, most)
            query = select(_machines).where(_machines.c.name == host, _machines.c.kind == "machine")
            node = conn.execute(query).first()
            if node is None:
                raise CompositionRefused(f"machine {host!r} does not exist", unknown=(host,))
            want_cpus, want_mem = _share(node.cpus, node.memory_gb, cpus, memory_gb)
            cpu_left, mem_left = room_left(conn)
            if cpu_left[host] + 1e-9 < want_cpus or mem_left[host] + 1e-9 < want_mem:
                raise CompositionRefused(
                    f"machine {host} has {cpu_left[host]:g} cpus and {mem_left[host]:g} GB left; "
                    f"the composition asks for {want_cpus:g} cpus and {want_mem:g} GB", in_use=(host,))
            placed = _devices_for(conn, host, node.rack, devices, device_gbps)
            slice_id = new_id("s")
            placement = SlicePlacement(slice_id, (PlacedTask(f"{slice_id}/0", host, want_cpus, want_mem, placed),))
            _check_bandwidth(conn, placement)
            if admit is not None:
                problem = admit(holdings_by_tenant(conn), placement_usage(placement))
                if problem:
                    raise CompositionRefused(problem, exhausted=True)
            new_slices(conn, [{"id": slice_id, "job_id": None, "tenant": tenant, "name": name, "attempt": 1,
                               "state": SliceState.COMPOSING, "outcome": None, "detail": None,
                               "placement": placement.to_json(), "handle": None, "created_at": now,
                               "updated_at": now}], now)
            if devices:
                hold_devices(conn, devices, slice_id)
        return slice_id

    def decompose(self, slice_id: str, why: str = "decomposed by its owner") -> bool:
        """Send a composition (composing or composed) to teardown. False when it is no longer either."""
        with self.write_core(urgent=True) as conn:
            return move_slice(conn, slice_id, SliceState.TEARING_DOWN, why, DECOMPOSABLE_SLICE_STATES, time.time(),
                              outcome=SliceOutcome.CANCELLED, detail=why) is not None

    def update_composition(self, slice_id: str, add: list[str], remove: list[str], device_gbps: float = 0.0,
                           admit: Admit | None = None) -> bool:
        """Add devices to and remove devices from a composed composition (module docstring): the slice goes
        back to `composing` until the loop has attached and detached them.

        CompositionRefused: `in_use` for a device added that is not free, or for a composition that is not
        `composed` (it is composing, or being torn down: an update waits for the last one to end);
        `unknown` for a device added that does not exist or one removed that the composition does not hold,
        or for its machine (a composition is its machine: decompose it instead); `exhausted` when what is
        added passes its tenant's quota (`admit`) or a link's bandwidth, as for `compose`. False: nothing to
        change (a repeat of an update that was made).
        """
        now = time.time()
        with self.write_core(urgent=True) as conn:
            row = conn.execute(select(_slices.c.state, _slices.c.job_id, _slices.c.placement)
                               .where(_slices.c.id == slice_id)).first()
            if row is None or row.job_id is not None:
                raise CompositionRefused(f"no composition {slice_id!r}", unknown=(slice_id,))
            if row.state != SliceState.COMPOSED:
                raise CompositionRefused(f"composition {slice_id} is {row.state}: it can be updated once it is "
                                         "composed", in_use=(slice_id,))
            placement = SlicePlacement.from_json(slice_id, row.placement)
            task = placement.tasks[0]
            new = _removable(task, remove)
            host_rack = conn.execute(select(_machines.c.rack).where(_machines.c.name == task.machine)).scalar_one()
            added = _devices_for(conn, task.machine, host_rack, [d for d in add if placement.device(d) is None],
                                 device_gbps)
            if not added and not new:
                return False
            more = SlicePlacement(slice_id, (replace(task, cpus=0.0, memory_gb=0.0, devices=added),))
            _check_bandwidth(conn, more)
            problem = admit(holdings_by_tenant(conn), placement_usage(more)) if admit is not None and added else None
            if problem:
                raise CompositionRefused(problem, exhausted=True)
            placement = SlicePlacement(slice_id, (replace(task, devices=task.devices + added), *placement.tasks[1:]))
            why = "; ".join([f"adding {', '.join(d.id for d in added)}"] * bool(added) +
                            [f"removing {', '.join(new)}"] * bool(new))
            move_slice(conn, slice_id, SliceState.COMPOSING, why, (SliceState.COMPOSED,), now,
                       placement=placement.to_json(), detail=None)
            _ask_steps(conn, slice_id, [d.id for d in added], new, now)
            if added:
                hold_devices(conn, [d.id for d in added], slice_id)
        return True

    def removals(self, slice_id: str) -> set[str]:
        """The devices an update asked to detach from a composition that are not detached yet."""
        s = _steps.c
        query = select(s.target).where(s.slice_id == slice_id, s.op == DETACH, s.status != StepStatus.DONE)
        with self.read_core() as conn:
            return {str(t) for t in conn.execute(query).scalars()}

    def any_slice(self, slice_id: str) -> LiveSlice | None:
        """One slice, live or not (None when it never was)."""
        with self.read_core() as conn:
            rows = _slices_read(conn, slice_id, live=False)
        return rows[0] if rows else None

    def redfish_inventory(self) -> Inventory:
        """Machines, pools, devices and live slices, in inventory order, read in one transaction."""
        with self.read_core() as conn:
            m = _machines.c
            nodes = tuple(NodeRow(r.name, r.kind, r.rack, r.cpus, r.memory_gb) for r in conn.execute(
                select(m.name, m.kind, m.rack, m.cpus, m.memory_gb).order_by(m.position)))
            d = _devices.c
            query = select(d.id, d.kind, d.model, d.location, d.index, d.capacity, d.health, d.drained, d.slice_id)
            devices = tuple(DeviceInfo(*row) for row in conn.execute(query.order_by(d.position)))
            reach = read_reach(conn)
            gbps = {str(i): float(g) for i, g in conn.execute(select(_links.c.id, _links.c.gbps))}
            return Inventory(nodes, devices, tuple(_slices_read(conn)), reach.down, reach, gbps)


def _removable(task: PlacedTask, remove: list[str]) -> list[str]:
    """The devices to remove that the composition holds; CompositionRefused naming one it does not hold."""
    held = {d.id for d in task.devices}
    if task.machine in remove:
        raise CompositionRefused(f"{task.machine} is the composition's machine: it cannot be removed (decompose the "
                                 "composition instead)", unknown=(task.machine,))
    stray = tuple(d for d in remove if d not in held)
    if stray:
        raise CompositionRefused(f"device {stray[0]!r} is not part of the composition", unknown=stray)
    return list(dict.fromkeys(remove))


def _ask_steps(conn: Connection, slice_id: str, added: list[str], removed: list[str], now: float) -> None:
    """The steps an update asks for: a device added gets a fresh attach (its old attach and detach, from an
    earlier time it was part of the composition, are forgotten); a device removed a detach, `started` with
    no try yet, which the loop runs (and a restart resumes)."""
    s = _steps.c
    if added:
        conn.execute(delete(_steps).where(s.slice_id == slice_id, s.op.in_((ATTACH, DETACH)), s.target.in_(added)))
    if removed:
        conn.execute(delete(_steps).where(s.slice_id == slice_id, s.op == DETACH, s.target.in_(removed)))
        conn.execute(insert(_steps), [{"slice_id": slice_id, "op": DETACH, "target": d, "status": StepStatus.STARTED,
                                       "tries": 0, "started_at": now} for d in removed])


def _share(have_cpus: float, have_mem: float, cpus: float | None, memory_gb: float | None) -> tuple[float, float]:
    """The cpus and memory a composition holds: as asked; the whole machine; or one in proportion to the other."""
    if cpus is None and memory_gb is None:
        return have_cpus, have_mem
    if cpus is None:  # whole cores, at least one (as a Redfish CoreCount is), in proportion to the memory
        share = have_cpus * min(1.0, (memory_gb or 0.0) / have_mem)
        return min(have_cpus, max(1.0, math.ceil(share - 1e-9))), float(memory_gb or 0.0)
    if memory_gb is None:
        return cpus, have_mem * min(1.0, cpus / have_cpus)
    return cpus, memory_gb


def _slices_read(conn: Connection, slice_id: str | None = None, live: bool = True) -> list[LiveSlice]:
    """The live slices (or the one asked for, live or not), each with its owner: its own or its job's tenant."""
    s = _slices.c
    query = (select(s.id, s.job_id, s.tenant, _jobs.c.tenant.label("job_tenant"), s.name, s.state, s.placement,
                    s.created_at, s.outcome, s.detail)
             .outerjoin(_jobs, _jobs.c.id == s.job_id).order_by(s.created_at, s.id))
    if live:
        query = query.where(s.state.in_(LIVE_SLICE_STATES))
    if slice_id is not None:
        query = query.where(s.id == slice_id)
    return [LiveSlice(r.id, r.job_id, r.tenant or r.job_tenant, r.name, SliceState(r.state),
                      SlicePlacement.from_json(r.id, r.placement), r.created_at, r.outcome, r.detail)
            for r in conn.execute(query)]


def _check_count(conn: Connection, tenant: str, most: int) -> None:
    """CompositionRefused (`exhausted`) when `tenant` holds `most` live compositions already."""
    s = _slices.c
    n = conn.execute(select(func.count()).select_from(_slices).where(
        s.job_id.is_(None), s.tenant == tenant, s.state.in_(LIVE_SLICE_STATES))).scalar_one()
    if n >= most:
        raise CompositionRefused(f"tenant {tenant!r} holds {n} compositions; at most {most} at once "
                                 "(max_compositions_per_tenant): decompose one first", exhausted=True)


def _check_bandwidth(conn: Connection, placement: SlicePlacement) -> None:
    """CompositionRefused (`exhausted`) when a link of a remote device's path lacks the bandwidth it reserves
    after the live slices' traffic (what a round's commit checks for a job's slice)."""
    load = placement.link_load()
    if not load:
        return
    left = {str(i): float(g) for i, g in conn.execute(select(_links.c.id, _links.c.gbps)
                                                       .where(_links.c.id.in_(list(load))))}
    for other in live_placements(conn):
        for link, gbps in other.link_load().items():
            if link in left:
                left[link] -= gbps
    short = sorted(link for link, gbps in load.items() if link in left and left[link] + 1e-9 < gbps)
    if short:
        raise CompositionRefused(f"link {short[0]} has {max(left[short[0]], 0.0):g} Gb/s left; the composition's "
                                 f"remote devices reserve {load[short[0]]:g} Gb/s on it", exhausted=True)


def _devices_for(conn: Connection, host: str, host_rack: str, devices: list[str], gbps: float = 0.0
                 ) -> tuple[PlacedDevice, ...]:
    """The devices as the composition's placement holds them; CompositionRefused unless each is free and
    neither it nor the host is behind a down link (what a commit's snapshot would not offer either).

    Read with a lock (FOR UPDATE on PostgreSQL), as a commit reads the devices it grants. A remote
    device's path crosses its location's and the host's uplinks (and the racks' when they differ);
    a remote device reserves `gbps` on each (`composition_device_gbps`), as a job's device reserves its
    profile's bandwidth.
    """
    if len(set(devices)) != len(devices):
        raise CompositionRefused("a device is named twice", unknown=tuple(d for d in devices if devices.count(d) > 1))
    d = _devices.c
    rows = {r.id: r for r in conn.execute(select(d.id, d.kind, d.model, d.location, d.health, d.drained, d.slice_id)
                                          .where(d.id.in_(devices)).with_for_update())} if devices else {}
    unknown = tuple(x for x in devices if x not in rows)
    if unknown:
        raise CompositionRefused(f"device {unknown[0]!r} does not exist", unknown=unknown)
    reach = read_reach(conn)
    cut = reach.link_to(host)
    if cut is not None and devices:  # no path from a cut-off host to any device
        raise CompositionRefused(f"machine {host} is unreachable (link {cut} is down)", in_use=(host,))
    taken = tuple(x for x in devices if rows[x].slice_id is not None or rows[x].health != Health.HEALTHY
                  or rows[x].drained or not reach.reachable(rows[x].location))
    if taken:
        r = rows[taken[0]]
        why = "is held by another slice" if r.slice_id is not None else "has failed" if r.health != Health.HEALTHY \
            else "is drained" if r.drained else f"is unreachable (link {reach.link_to(r.location)} is down)"
        raise CompositionRefused(f"device {taken[0]} {why}", in_use=taken)
    racks = dict(conn.execute(select(_machines.c.name, _machines.c.rack)
                              .where(_machines.c.name.in_({rows[x].location for x in devices}))).all())
    out = []
    for x in devices:
        r = rows[x]
        remote = r.location != host
        path: tuple[str, ...] = ()
        if remote:
            rack = racks.get(r.location, host_rack)
            path = (f"up:{r.location}", f"up:{host}") if rack == host_rack else (
                f"up:{r.location}", f"rack:{rack}", f"rack:{host_rack}", f"up:{host}")
        out.append(PlacedDevice(r.id, r.kind, remote, r.location, path, gbps if remote else 0.0, r.model))
    return tuple(out)


__all__ = ["UPDATE_FAILED", "CompositionOps", "CompositionRefused", "DeviceInfo", "Inventory", "LiveSlice", "NodeRow"]
