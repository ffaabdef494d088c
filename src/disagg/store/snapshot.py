"""The snapshot a round plans on, and the room left that its commit re-checks against.

Read as columns, not ORM objects: a snapshot is read every round (1.3 s as objects at 52,500
devices); the room left reads only machines and the live slices, not every device.
"""

from __future__ import annotations

from sqlalchemy import Connection, Table, select

from disagg.model import Allocation, Cluster, Device, Machine, Pool, Reach, SlicePlacement
from disagg.model.states import (
    DEVICE_DRAINED,
    DEVICE_FAILED,
    DEVICE_HEALTHY,
    DEVICE_UNREACHABLE,
    LIVE_SLICE_STATES,
    DeviceHealth,
    Health,
)
from disagg.store.base import StoreBase
from disagg.store.models import DeviceRow, LinkRow, MachineRow, SliceRow

_machines: Table = MachineRow.__table__  # type: ignore[assignment]
_devices: Table = DeviceRow.__table__  # type: ignore[assignment]
_links: Table = LinkRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]


def holder(slice_id: str, job_id: str | None) -> str:
    """Who holds a live slice's resources in a snapshot's allocations: its job, or, for a composition
    (no job), `composition:<slice>`."""
    return job_id if job_id is not None else f"composition:{slice_id}"


def live_slices_placed(conn: Connection) -> list[tuple[str, str, SlicePlacement]]:
    """(slice, job — or the composition's holder, see `holder` —, placement) of every slice that still
    holds resources."""
    query = select(_slices.c.id, _slices.c.job_id, _slices.c.placement).where(_slices.c.state.in_(LIVE_SLICE_STATES))
    return [(str(i), holder(str(i), j), SlicePlacement.from_json(i, p)) for i, j, p in conn.execute(query)]


def live_placements(conn: Connection) -> list[SlicePlacement]:
    return [p for _, _, p in live_slices_placed(conn)]


def live_allocations(conn: Connection) -> list[Allocation]:
    """What the live slices hold, as allocations (the snapshot's warm part, and what a commit re-checks)."""
    return [a for _, job, p in live_slices_placed(conn) for a in p.allocations(job)]


def room_left(conn: Connection) -> tuple[dict[str, float], dict[str, float]]:
    """The cpus and memory each machine has left after what the live slices hold."""
    cpu: dict[str, float] = {}
    mem: dict[str, float] = {}
    query = select(_machines.c.name, _machines.c.cpus, _machines.c.memory_gb).where(_machines.c.kind == "machine")
    for name, cpus, memory in conn.execute(query):
        cpu[name], mem[name] = cpus, memory
    for a in live_allocations(conn):
        cpu[a.machine] -= a.cpus
        mem[a.machine] -= a.memory_gb
    return cpu, mem


def read_reach(conn: Connection) -> Reach:
    """What the down links cut off now (`model.cluster.Reach`), for the views that read the store."""
    down = [str(r) for r in conn.execute(select(_links.c.id).where(_links.c.up.is_(False))).scalars()]
    if not down:
        return Reach()
    return Reach.of(down, ((str(n), str(r)) for n, r in conn.execute(select(_machines.c.name, _machines.c.rack))))


def _snapshot_health(stored: str, drained: bool, reachable: bool) -> DeviceHealth:
    """A device's word in the snapshot: failed, unreachable (behind a down link), drained or healthy."""
    if stored == Health.FAILED:
        return DEVICE_FAILED
    if not reachable:
        return DEVICE_UNREACHABLE
    return DEVICE_DRAINED if drained else DEVICE_HEALTHY


def read_cluster(conn: Connection) -> Cluster:
    """The inventory as a snapshot (health and the down links included) with what live slices hold as
    allocations. What a down link cuts off is offered to no policy (`Cluster.reach`): its devices are
    `unreachable`, its machines have no room (`FreeState`), so no path through the link is proposed."""
    m = _machines.c
    mrows = conn.execute(select(m.name, m.kind, m.rack, m.cpus, m.memory_gb, m.uplink_gbps).order_by(m.position)).all()
    links = conn.execute(select(_links.c.id, _links.c.gbps, _links.c.up)).all()
    down = frozenset(r.id for r in links if not r.up)
    reach = Reach.of(down, ((r.name, r.rack) for r in mrows))
    rack_gbps = next((r.gbps for r in links if r.id.startswith("rack:")), 100.0)
    machines = tuple(Machine(r.name, r.rack, r.cpus, r.memory_gb, r.uplink_gbps) for r in mrows if r.kind == "machine")
    pools = tuple(Pool(r.name, r.rack, r.uplink_gbps) for r in mrows if r.kind == "pool")
    d = _devices.c
    columns = (d.id, d.kind, d.model, d.location, d.index, d.capacity, d.health, d.drained)
    devices = []
    # unpacked by position: a row's `.index` is the tuple method, not the column
    for dev_id, kind, model, location, index, capacity, stored, drained in conn.execute(
        select(*columns).order_by(d.position)
    ):
        health = _snapshot_health(stored, drained, reach.reachable(location))
        devices.append(Device(dev_id, kind, model, location, index, capacity, health))
    return Cluster(machines=machines, pools=pools, devices=tuple(devices), rack_uplink_gbps=rack_gbps,
                   allocations=tuple(live_allocations(conn)), down_links=down)


class SnapshotOps(StoreBase):
    def cluster(self) -> Cluster:
        """The inventory as a snapshot (health included) with what live slices hold as allocations."""
        with self.read_core() as conn:
            return read_cluster(conn)


__all__ = ["SnapshotOps", "holder", "live_allocations", "live_placements", "live_slices_placed", "read_cluster",
           "read_reach", "room_left"]
