"""The snapshot a round plans on, and the room left that its commit re-checks against.

Read as columns, not ORM objects: a snapshot is read every round (1.3 s as objects at 52,500
devices); the room left reads only machines and the live slices, not every device.

What never changes is read once: the inventory's machines, pools and devices (`Inventory`: the store
only ever adds to them, so their counts and last positions tell a change) and each live job slice's
placement (`PlacementCache`: committed once, never rewritten; a composition's, which an update
rewrites, is read every time). A round then reads only what moves — the down links, the devices that
are not healthy or are drained, and which slices are live (on SQLite, only the slices changed since its
last read: `PlacementCache.fed`) — instead of every machine, device and live placement (1.7–3.3 s
a round at 12,500 machines under load, `docs/benchmarks.md`).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import Any

from sqlalchemy import Connection, Engine, Table, bindparam, func, or_, select

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
from disagg.store.models import DeviceRow, LinkRow, MachineRow, SliceChangesRow, SliceRow

_machines: Table = MachineRow.__table__  # type: ignore[assignment]
_devices: Table = DeviceRow.__table__  # type: ignore[assignment]
_links: Table = LinkRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]
_changes: Table = SliceChangesRow.__table__  # type: ignore[assignment]


def holder(slice_id: str, job_id: str | None) -> str:
    """Who holds a live slice's resources in a snapshot's allocations: its job, or, for a composition
    (no job), `composition:<slice>`."""
    return job_id if job_id is not None else f"composition:{slice_id}"


#: (slice, holder, placement) of each slice that holds resources.
LiveSlices = list[tuple[str, str, SlicePlacement]]
#: Slice ids per `IN (...)` when reading placements not seen yet.
_CHUNK = 500


class PlacementCache:
    """One store's live job slices' placements, parsed once: a job slice's placement is written when its
    slice is committed and never again, so its id names it for good. Bounded by the live set: what left
    it is dropped when the cache outgrows it. Thread-safe (the loop, the API).

    On SQLite a reader that asks for `changes` gets the live slices as a `_Feed`: the last such read with
    the slices numbered since put in or taken out, and what they hold as allocations, kept the same way:
    a round under load changes about a tenth of 12,000 live slices, and walking all of them twice a
    round (the snapshot, the commit's ledger) to rebuild the same list was a tenth of the loop's time."""

    def __init__(self) -> None:
        self._placed: dict[str, SlicePlacement] = {}
        self._allocations: dict[str, tuple[Allocation, ...]] = {}
        self._lock = threading.Lock()
        #: The last read (when, by `time.monotonic`; each live slice's state, or the rows it was read from:
        #: slice, job, state; what `live` made of them), for a reader content with what was live a moment
        #: ago (`recent`, which joins them: a commit's ledger has no use for the join).
        self._last: tuple[float, Mapping[str, str] | Sequence[Any], LiveSlices] | None = None
        self._feed: _Feed | None = None  # the last read of the live slices by their numbered changes

    def recent(self, max_age_s: float) -> list[tuple[str, str, str, SlicePlacement]] | None:
        """The live job slices (slice, job, state, placement) as the last read found them, if it was at
        most `max_age_s` ago; else None (read them)."""
        last = self._last
        if last is None or time.monotonic() - last[0] > max_age_s:
            return None
        _, read, out = last
        state = read if isinstance(read, Mapping) else {str(i): s for i, _, s in read}
        return [(i, h, state[i], p) for i, h, p in out if not h.startswith("composition:")]

    def remember(self, placed: dict[str, SlicePlacement]) -> None:
        """Placements this process has just written (a round's new slices), kept as written: the next
        read finds them known and neither reads nor parses them (a thousand a round under load, a tenth of
        the loop's time). An id that never turns up in a read (its commit rolled back) is dropped with
        the rest of what left the live set."""
        with self._lock:
            self._placed.update(placed)

    def held(self, conn: Connection, changes: bool = False) -> tuple[LiveSlices, list[Allocation]]:
        """The live slices with their placements, and what they hold as allocations, from one read: each
        job slice's made once, like its placement. `changes`: on SQLite, kept change by change (`fed`)."""
        if changes and conn.dialect.name == "sqlite":
            feed = self.fed(conn)
            return feed.live(), feed.allocations()
        live = self.live(conn)
        out: list[Allocation] = []
        made: dict[str, tuple[Allocation, ...]] = {}
        known = self._allocations
        for slice_id, job, placement in live:
            kept = known.get(slice_id)
            if kept is None or job.startswith("composition:"):
                kept = made[slice_id] = tuple(placement.allocations(job))
            out.extend(kept)
        with self._lock:
            if len(self._allocations) > 2 * len(self._placed) + 1000:
                self._allocations = {i: a for i, a in self._allocations.items() if i in self._placed}
            self._allocations.update((i, a) for i, a in made.items() if i in self._placed)
        return live, out

    def live(self, conn: Connection, changes: bool = False) -> LiveSlices:
        """The live slices with their placements. `changes`: on SQLite, from the last such read and the
        slices changed since (`fed`), not a read of every live slice."""
        if changes and conn.dialect.name == "sqlite":
            return self.fed(conn).live()
        read_at = time.monotonic()
        raw = conn.execute(_LIVE).all()
        out = self._placements(conn, [(str(i), j) for i, j, _ in raw])
        with self._lock:
            self._keep_live(out)
            self._last = (read_at, raw, out)
        return out

    def _keep_live(self, live: LiveSlices) -> None:
        """Drop the kept placements of slices that ended, once they outgrow the live set. Under the lock."""
        if len(self._placed) > 2 * len(live) + 1000:
            self._placed = {i: p for i, h, p in live if not h.startswith("composition:")}

    def _placements(self, conn: Connection, rows: list[tuple[str, str | None]]) -> LiveSlices:
        """(slice, holder, placement) of each (slice, job) of `rows`: a job slice's placement as kept, a
        composition's (which an update rewrites) and one not seen yet read. Keeps what it read, and only
        the live ones once the kept outgrow them."""
        with self._lock:
            known = dict(self._placed)
        missing = [i for i, j in rows if j is None or i not in known]
        fresh: dict[str, SlicePlacement] = {}
        for k in range(0, len(missing), _CHUNK):
            query = select(_slices.c.id, _slices.c.placement).where(_slices.c.id.in_(missing[k:k + _CHUNK]))
            fresh.update((str(i), SlicePlacement.from_json(i, p)) for i, p in conn.execute(query))
        out = [(i, holder(i, j), fresh[i] if i in fresh else known[i]) for i, j in rows if i in fresh or i in known]
        with self._lock:
            self._placed.update((i, fresh[i]) for i, j in rows if j is not None and i in fresh)
        return out

    def fed(self, conn: Connection) -> _Feed:
        """The live slices as of the store's last numbered change (migration `i23_slice_changes`: SQLite's
        triggers number each change to a slice in commit order): the last such read's, with the slices
        numbered since put in or taken out; every live slice read again when a slice was deleted since,
        on the first read, or for a view older than the last read's."""
        read_at = time.monotonic()
        seq, gone = conn.execute(_CHANGES).one()
        with self._lock:
            last = self._feed
        if last is not None and last.gone == gone and last.seq == seq:
            feed = last
        elif last is None or last.gone != gone or last.seq > seq:
            raw = conn.execute(_LIVE).all()
            states = {str(i): state for i, _, state in raw}
            placed = self._placements(conn, [(str(i), j) for i, j, _ in raw])
            feed = _Feed(seq, gone, states, placed, None if last is None else last.kept_for(placed))
        else:
            states, arriving, left = dict(last.states), [], []
            for i, j, state in conn.execute(_CHANGED, {"seq": last.seq}):
                if state in LIVE_SLICE_STATES:
                    states[str(i)] = state
                    arriving.append((str(i), j))
                elif states.pop(str(i), None) is not None:
                    left.append(str(i))
            feed = last.changed(seq, states, left, self._placements(conn, arriving))
        live = feed.live()
        with self._lock:
            if self._feed is None or self._feed.seq <= seq:
                self._feed = feed
            self._keep_live(live)
            self._last = (read_at, feed.states, live)
        return feed


@dataclass(frozen=True)
class LiveUse:
    """What the live slices hold in all: cpus and memory per machine, Gbit/s per link (their placements'
    `link_loads`). A commit's room is the inventory less this (`store.plans`), asked only of the machines
    and links its placements name: summed afresh it walked every live slice's allocations and link loads
    each commit (a quarter of a commit at 12,500 machines), kept with the live set (`_Feed`) it moves only
    by the slices that changed since the last read. Sums kept so may differ from sums made afresh in the
    last bits: the commit's check allows `placement.commit.EPS`."""

    cpu: dict[str, float]
    memory: dict[str, float]
    links: dict[str, float]

    @classmethod
    def of(cls, held: Iterable[Iterable[Allocation]], placements: Iterable[SlicePlacement]) -> LiveUse:
        """Summed afresh: each live slice's allocations (`held`) and its placement's link loads."""
        use = cls({}, {}, {})
        use._add(chain.from_iterable(held), placements, 1.0)
        return use

    def changed(self, out: Sequence[tuple[Iterable[Allocation], SlicePlacement]],
                into: Sequence[tuple[Iterable[Allocation], SlicePlacement]]) -> LiveUse:
        """The use once the slices `out` (what each held, its placement) have left and `into` arrived."""
        if not out and not into:
            return self
        use = LiveUse(dict(self.cpu), dict(self.memory), dict(self.links))
        for sign, moved in ((-1.0, out), (1.0, into)):
            use._add(chain.from_iterable(a for a, _ in moved), [p for _, p in moved], sign)
        return use

    def _add(self, allocations: Iterable[Allocation], placements: Iterable[SlicePlacement], sign: float) -> None:
        """Add (`sign` 1) or take out (-1) allocations and placements' link loads. Only while being made."""
        cpu, memory, links = self.cpu, self.memory, self.links
        for a in allocations:
            cpu[a.machine] = cpu.get(a.machine, 0.0) + sign * a.cpus
            memory[a.machine] = memory.get(a.machine, 0.0) + sign * a.memory_gb
        for p in placements:
            for link, gbps in p.link_loads:
                links[link] = links.get(link, 0.0) + sign * gbps


class _Feed:
    """A read of the live slices by their numbered changes (`PlacementCache.fed`): as of change `seq`,
    `gone` slices deleted before it; `states`: slice → state; each live slice's holder and placement, and
    the allocations it holds, made once per slice and carried to the next feed (`changed`). Never
    changed once made but for what `live`, `allocations` and `use` keep of themselves, which any thread
    may make (the same)."""

    def __init__(self, seq: int, gone: int, states: dict[str, str], placed: LiveSlices,
                 held: dict[str, tuple[Allocation, ...]] | None = None,
                 entries: dict[str, tuple[str, SlicePlacement]] | None = None, use: LiveUse | None = None) -> None:
        self.seq, self.gone, self.states = seq, gone, states
        self.entries = {i: (h, p) for i, h, p in placed} if entries is None else entries
        self.held = {i: tuple(p.allocations(h)) for i, (h, p) in self.entries.items()} if held is None else held
        self._live: LiveSlices | None = None
        self._allocations: list[Allocation] | None = None
        self._use = use

    def changed(self, seq: int, states: dict[str, str], left: list[str], arrived: LiveSlices) -> _Feed:
        """The next feed: the slices that `left` the live set taken out, those that `arrived` (or changed
        while live) put in with what they hold; their use moved by them, once a reader has asked for it
        (`use`: then every feed after carries it)."""
        entries, held = dict(self.entries), dict(self.held)
        out: list[tuple[tuple[Allocation, ...], SlicePlacement]] = []
        into: list[tuple[tuple[Allocation, ...], SlicePlacement]] = []
        for i in left:
            if entries.pop(i, None) is not None:
                out.append((held.pop(i), self.entries[i][1]))
        for i, h, p in arrived:
            if i in entries:  # (changed while live: what it held out, what it holds now in)
                out.append((held[i], entries[i][1]))
            entries[i] = (h, p)
            now = held[i] = tuple(p.allocations(h))
            into.append((now, p))
        use = self._use
        return _Feed(seq, self.gone, states, [], held, entries, None if use is None else use.changed(out, into))

    def use(self) -> LiveUse:
        """What the live slices hold in all (`LiveUse`), summed afresh on a feed that does not carry it."""
        if self._use is None:
            self._use = LiveUse.of(self.held.values(), (p for _, p in self.entries.values()))
        return self._use

    def kept_for(self, placed: LiveSlices) -> dict[str, tuple[Allocation, ...]]:
        """What each of `placed` holds, as this feed made it where the slice has the same holder and
        placement here (a whole read again after a deletion: most live slices are the same)."""
        held, entries = self.held, self.entries
        return {i: held[i] if i in entries and entries[i][0] == h and entries[i][1] is p else tuple(p.allocations(h))
                for i, h, p in placed}

    def live(self) -> LiveSlices:
        if self._live is None:
            self._live = [(i, h, p) for i, (h, p) in self.entries.items()]
        return self._live

    def allocations(self) -> list[Allocation]:
        if self._allocations is None:
            self._allocations = list(chain.from_iterable(self.held.values()))
        return list(self._allocations)


_LIVE = select(_slices.c.id, _slices.c.job_id, _slices.c.state).where(_slices.c.state.in_(LIVE_SLICE_STATES))
_CHANGES = select(_changes.c.seq, _changes.c.gone).where(_changes.c.id == 1)
_CHANGED = select(_slices.c.id, _slices.c.job_id, _slices.c.state).where(_slices.c.seq > bindparam("seq"))


class _InventoryKept:
    """The inventory read last, and its devices with the health words read last: the same for every engine
    of one store (its writer's and its reader's), since `Inventory.version` tells a change whichever reads it."""

    def __init__(self) -> None:
        self.inventory: Inventory | None = None
        #: The inventory's devices with the last health words read, and what they were read from: the
        #: same tuple while nothing changes, so a round's placement keeps what it worked out of the
        #: devices (`placement.state.inventory_arrays` compares them by identity).
        self.health: tuple[object, tuple[Device, ...]] | None = None


class _Kept:
    """What one engine keeps between reads: its live placements, and the store's inventory (`shared`)."""

    def __init__(self) -> None:
        self.placements = PlacementCache()
        self.shared = _InventoryKept()


#: Each store's kept reads, by its SQLAlchemy engine (one per `Store`; gone with it).
_KEPT: weakref.WeakKeyDictionary[Engine, _Kept] = weakref.WeakKeyDictionary()
_KEPT_LOCK = threading.Lock()


def _kept_for(engine: Engine) -> _Kept:
    with _KEPT_LOCK:
        return _KEPT.setdefault(engine, _Kept())


def _kept(conn: Connection) -> _Kept:
    return _kept_for(conn.engine)


def share_inventory(engines: Iterable[Engine]) -> None:
    """One store's engines keep one inventory: the first commit read the 52,500 devices again on the
    writer's engine (half a second) after the first snapshot had read them on the reader's."""
    shared = _InventoryKept()
    for engine in set(engines):
        _kept_for(engine).shared = shared


def remember_placed(engines: Iterable[Engine], placed: dict[str, SlicePlacement]) -> None:
    """`PlacementCache.remember` for each of a store's engines (its writer's and its readers')."""
    for engine in set(engines):
        _kept_for(engine).placements.remember(placed)


def live_slices_placed(conn: Connection, changes: bool = False) -> LiveSlices:
    """(slice, job — or the composition's holder, see `holder` —, placement) of every slice that still
    holds resources. `changes`: on SQLite, the last such read on this engine with the slices changed since
    (`PlacementCache.fed`). Only before the transaction has written a slice: the read keeps what it
    saw, under the change number it saw, for the next; changes of its own that it then rolled back would
    leave the next read a number that other changes take."""
    return _kept(conn).placements.live(conn, changes)


def recent_live_jobs(engine: Engine, max_age_s: float) -> list[tuple[str, str, str, SlicePlacement]] | None:
    """The live job slices (slice, job, state, placement) as this store's last read of the live slices on
    `engine` found them (a round's snapshot), if it was at most `max_age_s` ago; else None."""
    with _KEPT_LOCK:
        kept = _KEPT.get(engine)
    return None if kept is None else kept.placements.recent(max_age_s)


def live_placements(conn: Connection) -> list[SlicePlacement]:
    return [p for _, _, p in live_slices_placed(conn)]


def live_slices_held(conn: Connection, changes: bool = False) -> tuple[LiveSlices, list[Allocation]]:
    """`live_slices_placed` and what those slices hold as allocations, from one read (a commit's ledger
    needs both); `changes` as there, with the same proviso."""
    return _kept(conn).placements.held(conn, changes)


def live_use(conn: Connection) -> LiveUse:
    """What the live slices hold in all, as of now (`LiveUse`): on SQLite kept change by change with the
    live set (`PlacementCache.fed`), elsewhere summed from a read of them."""
    cache = _kept(conn).placements
    if conn.dialect.name == "sqlite":
        return cache.fed(conn).use()
    live, held = cache.held(conn)
    return LiveUse.of([held], (p for _, _, p in live))


def live_allocations(conn: Connection, changes: bool = False) -> list[Allocation]:
    """What the live slices hold, as allocations (the snapshot's warm part); `changes`: read only the
    slices changed since the last read (SQLite)."""
    return live_slices_held(conn, changes)[1]


def room_left(conn: Connection) -> tuple[dict[str, float], dict[str, float]]:
    """The cpus and memory each machine has left after what the live slices hold, every machine (a
    composition's check; a commit asks `plans.CommitRoom` of the machines it places on)."""
    machines = current_inventory(conn).machines
    cpu = {m.name: m.cpus for m in machines}
    mem = {m.name: m.memory_gb for m in machines}
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


@dataclass(frozen=True)
class Inventory:
    """The snapshot's part that changes only with the cluster spec: machines, pools and devices as if all
    were healthy, read once per `version` (the rows' counts and last positions: a sync that adds rows
    numbers them past the last, one that rewrites or removes rows renumbers every row past it)."""

    version: tuple[int, ...]
    machines: tuple[Machine, ...]
    pools: tuple[Pool, ...]
    devices: tuple[Device, ...]
    device_at: dict[str, int]
    location_rack: tuple[tuple[str, str], ...]
    rack_gbps: float
    #: Every link's bandwidth, Gbit/s (its state, up or down, is read each time).
    link_gbps: dict[str, float]

    @cached_property
    def machine_size(self) -> dict[str, tuple[float, float]]:
        """Each machine's cpus and memory by name (a commit's room asks of the machines it places on)."""
        return {m.name: (m.cpus, m.memory_gb) for m in self.machines}


def inventory_version(conn: Connection) -> tuple[int, ...]:
    """The inventory changes only by `Store.sync_inventory`, and its counts and last positions change with
    each of its changes (`disagg.store.inventory`). One statement of five subqueries, each alone so that
    SQLite answers it from an index (`max(position)` beside `count()` in one SELECT scans every row: 4 ms
    at 52,500 devices)."""
    m, d = _machines.c, _devices.c
    parts = (select(func.count()).select_from(_machines), select(func.coalesce(func.max(m.position), -1)),
             select(func.count()).select_from(_devices), select(func.coalesce(func.max(d.position), -1)),
             select(func.count()).select_from(_links))
    row = conn.execute(select(*(p.scalar_subquery() for p in parts))).one()
    return tuple(int(v) for v in row)


def read_inventory(conn: Connection, version: tuple[int, ...]) -> Inventory:
    m = _machines.c
    mrows = conn.execute(select(m.name, m.kind, m.rack, m.cpus, m.memory_gb, m.uplink_gbps).order_by(m.position)).all()
    link_gbps = {str(i): float(g) for i, g in conn.execute(select(_links.c.id, _links.c.gbps))}
    rack_gbps = next((g for i, g in link_gbps.items() if i.startswith("rack:")), 100.0)
    machines = tuple(Machine(r.name, r.rack, r.cpus, r.memory_gb, r.uplink_gbps) for r in mrows if r.kind == "machine")
    pools = tuple(Pool(r.name, r.rack, r.uplink_gbps) for r in mrows if r.kind == "pool")
    d = _devices.c
    columns = (d.id, d.kind, d.model, d.location, d.index, d.capacity)
    # unpacked by position: a row's `.index` is the tuple method, not the column
    rows = conn.execute(select(*columns).order_by(d.position))
    devices = tuple(Device(dev_id, kind, model, location, index, capacity, DEVICE_HEALTHY)
                    for dev_id, kind, model, location, index, capacity in rows)
    return Inventory(version, machines, pools, devices, {dv.id: k for k, dv in enumerate(devices)},
                     tuple((str(r.name), str(r.rack)) for r in mrows), rack_gbps, link_gbps)


def current_inventory(conn: Connection) -> Inventory:
    """The store's inventory, read again only when rows were added since it was kept."""
    kept = _kept(conn).shared
    version = inventory_version(conn)
    inventory = kept.inventory
    if inventory is None or inventory.version != version:
        inventory = kept.inventory = read_inventory(conn, version)
    return inventory


def down_links(conn: Connection) -> frozenset[str]:
    return frozenset(str(r) for r in conn.execute(select(_links.c.id).where(_links.c.up.is_(False))).scalars())


def _with_health(conn: Connection, inv: Inventory, reach: Reach) -> tuple[Device, ...]:
    """The inventory's devices with the words that differ from healthy: failed, unreachable, drained."""
    d = _devices.c
    odd = conn.execute(select(d.id, d.health, d.drained).where(or_(d.health != Health.HEALTHY, d.drained.is_(True))))
    odd_rows = odd.all()
    if not odd_rows and not reach.down:
        return inv.devices
    kept = _kept(conn).shared
    key = (inv.version, frozenset((str(i), str(h), bool(dr)) for i, h, dr in odd_rows), reach.down)
    last = kept.health
    if last is not None and last[0] == key:
        return last[1]
    devices = list(inv.devices)
    if reach.down:
        for k, dv in enumerate(devices):
            if not reach.reachable(dv.location):
                devices[k] = Device(dv.id, dv.kind, dv.model, dv.location, dv.index, dv.capacity, DEVICE_UNREACHABLE)
    for dev_id, stored, drained in odd_rows:
        at = inv.device_at.get(str(dev_id))
        if at is not None:
            dv = devices[at]
            health = _snapshot_health(stored, drained, reach.reachable(dv.location))
            devices[at] = Device(dv.id, dv.kind, dv.model, dv.location, dv.index, dv.capacity, health)
    kept.health = (key, tuple(devices))
    return kept.health[1]


def read_cluster(conn: Connection, fresh: bool = False) -> Cluster:
    """The inventory as a snapshot (health and the down links included) with what live slices hold as
    allocations. What a down link cuts off is offered to no policy (`Cluster.reach`): its devices are
    `unreachable`, its machines have no room (`FreeState`), so no path through the link is proposed.
    `fresh`: read the inventory again, not the one kept (tests compare the two)."""
    inv = read_inventory(conn, inventory_version(conn)) if fresh else current_inventory(conn)
    down = down_links(conn)
    reach = Reach.of(down, inv.location_rack)
    return Cluster(machines=inv.machines, pools=inv.pools, devices=_with_health(conn, inv, reach),
                   rack_uplink_gbps=inv.rack_gbps, allocations=tuple(live_allocations(conn, changes=not fresh)),
                   down_links=down)


class SnapshotOps(StoreBase):
    def _open(self, url: str) -> None:
        super()._open(url)
        share_inventory((self.engine, self.read_engine))

    def cluster(self) -> Cluster:
        """The inventory as a snapshot (health included) with what live slices hold as allocations."""
        with self.read_core() as conn:
            return read_cluster(conn)

    def inventory(self) -> Inventory:
        """The inventory as kept: the same object until the cluster spec changes it (one version read)."""
        with self.read_core() as conn:
            return current_inventory(conn)


__all__ = ["Inventory", "PlacementCache", "SnapshotOps", "current_inventory", "down_links", "holder",
           "live_allocations", "live_placements", "live_slices_held", "live_slices_placed", "read_cluster",
           "read_reach", "recent_live_jobs", "room_left"]
