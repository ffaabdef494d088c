"""The inventory follows the cluster spec the controller starts with: machines, pools, devices, links.

An operator edits the spec (a machine retired, a node given more memory, a pool's GPUs swapped, a
spec written anew by `disagg discover`) and restarts. Before, the store only added what it lacked, so
a removed machine went on being placed on and a changed size was never read. Now `sync_inventory`
adds, changes and removes rows to match the spec, keeping each device's health and drain flag (but for
a device that is another one under the same id: `_replaced`), with one limit: nothing a live slice holds
may go away or shrink below what it holds (the machine's cpus and memory, the device itself), since a
running job cannot be moved by a restart. Such a spec is refused, naming each item and its holder, and
the store is left as it was.

Rows are rewritten rarely (a start with an edited spec), so a rewrite renumbers every row's
`position` past the old last one: `snapshot.inventory_version` (the counts and the last positions)
then tells every reader, in this process or a replica's, that the kept inventory is stale.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update
from sqlalchemy.orm import Session

from disagg.display import count, few
from disagg.model import Allocation, Cluster, SpecError
from disagg.model.states import Health
from disagg.placement.commit import EPS
from disagg.store.base import StoreBase
from disagg.store.models import DeviceRow, LinkRow, MachineRow
from disagg.store.snapshot import live_slices_held

#: The columns a spec sets, per table (the rest are the store's: health, drained, slice, position).
_MACHINE_COLUMNS = ("kind", "rack", "cpus", "memory_gb", "uplink_gbps")
_DEVICE_COLUMNS = ("kind", "model", "location", "index", "capacity")


@dataclass
class Diff:
    """What one table needs to match the spec: rows to add, keys whose spec columns differ, keys to remove."""

    added: list[dict[str, Any]] = field(default_factory=list)
    changed: dict[str, dict[str, Any]] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    @property
    def rewrites(self) -> bool:
        return bool(self.changed or self.removed)


def diff(have: Mapping[str, tuple[Any, ...]], want: Iterable[dict[str, Any]], key: str,
         columns: tuple[str, ...]) -> Diff:
    """Compare stored rows (key → their `columns`) with the spec's rows (dicts holding `key` and `columns`)."""
    out = Diff()
    seen: set[str] = set()
    for row in want:
        k = row[key]
        seen.add(k)
        stored = have.get(k)
        if stored is None:
            out.added.append(row)
        elif any(_differs(old, row[c]) for old, c in zip(stored, columns, strict=True)):
            out.changed[k] = row
    out.removed = sorted(k for k in have if k not in seen)
    return out


def _differs(old: Any, new: Any) -> bool:
    if isinstance(old, float) or isinstance(new, float):
        return abs(float(old) - float(new)) > EPS
    return bool(old != new)


def held_conflicts(machines: Diff, devices: Diff, held: Iterable[Allocation]) -> list[str]:
    """What the spec takes from live slices: a machine removed, or left with fewer cpus or less memory than
    its live tasks hold; a device removed or changed while a slice holds it. One sentence each."""
    use: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    holders: dict[str, set[str]] = defaultdict(set)
    for a in held:
        use[a.machine][0] += a.cpus
        use[a.machine][1] += a.memory_gb
        holders[a.machine].add(a.job)
        for d in a.devices:
            holders[d].add(a.job)
    problems = []
    for name in machines.removed:
        if name in holders:
            problems.append(f"machine {name} is removed, but {_by(holders[name])} runs on it")
    for name, row in machines.changed.items():
        cpus, memory = use.get(name, (0.0, 0.0))
        if row["cpus"] < cpus - EPS or row["memory_gb"] < memory - EPS:
            problems.append(f"machine {name} would have {row['cpus']:g} cpus and {row['memory_gb']:g} GB, but "
                            f"{_by(holders[name])} holds {cpus:g} cpus and {memory:g} GB on it")
    for dev in devices.removed:
        if dev in holders:
            problems.append(f"device {dev} is removed, but {_by(holders[dev])} holds it")
    for dev in devices.changed:
        if dev in holders:
            problems.append(f"device {dev} is changed, but {_by(holders[dev])} holds it")
    return problems


def _removals(nodes: list[str], devices: list[str], kinds: Mapping[str, str]) -> str:
    """Why a start that takes things out of the inventory waits for the operator's word: a spec for another
    cluster, or a start that forgot its `--cluster` (the FlowOS-RM testbed, by default), would take out
    every machine and hold every queued job; naming them, and the option that takes them out."""
    parts = []
    for what, keys in (("machine", [n for n in nodes if kinds[n] == "machine"]),
                       ("pool", [n for n in nodes if kinds[n] == "pool"]), ("device", devices)):
        if keys:
            parts.append(f"{count(len(keys), what)} ({few(keys)})")
    return (f"it takes {' and '.join(parts)} out of the inventory: a spec of another cluster, or a start without "
            "its --cluster? Start with --accept-inventory-removals (DISAGG_ACCEPT_INVENTORY_REMOVALS=true) to take "
            "them out; nothing was changed")


def _by(jobs: set[str]) -> str:
    return ", ".join(sorted(jobs))


@dataclass(frozen=True)
class InventoryChange:
    """What a sync did, per table: (added, changed, removed) keys."""

    machines: tuple[list[str], list[str], list[str]]
    devices: tuple[list[str], list[str], list[str]]
    links: tuple[list[str], list[str], list[str]]
    pools: tuple[list[str], list[str], list[str]]
    #: The changed devices that are another device now (kind, model or place): health and drain the spec's.
    replaced: list[str] = field(default_factory=list)

    @property
    def rewrote(self) -> bool:
        return any(t[1] or t[2] for t in (self.machines, self.pools, self.devices, self.links))

    def summary(self) -> str:
        """One line for the log: what changed, a few names of each (empty: nothing did)."""
        parts = []
        for what, (added, changed, removed) in (("machine", self.machines), ("pool", self.pools),
                                                ("device", self.devices), ("link", self.links)):
            for verb, keys in (("added", added), ("changed", changed), ("removed", removed)):
                if keys:
                    parts.append(f"{count(len(keys), what)} {verb} ({few(keys)})")
        if self.replaced:
            parts.append(f"{count(len(self.replaced), 'device')} another device now, its health and drain flag "
                         f"the spec's ({few(self.replaced)})")
        return "; ".join(parts)


def _rows(cluster: Cluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [{"name": m.name, "kind": "machine", "rack": m.rack, "cpus": m.cpus, "memory_gb": m.memory_gb,
              "uplink_gbps": m.uplink_gbps} for m in cluster.machines]
    nodes += [{"name": p.name, "kind": "pool", "rack": p.rack, "cpus": 0.0, "memory_gb": 0.0,
               "uplink_gbps": p.uplink_gbps} for p in cluster.pools]
    devices = [{"id": d.id, "kind": d.kind, "model": d.model, "location": d.location, "index": d.index,
                "capacity": d.capacity} for d in cluster.devices]
    links = [{"id": lk.id, "gbps": lk.gbps} for lk in cluster.links]
    return nodes, devices, links


def _stored_health(health: str) -> Health:
    """A spec's device health as the store keeps it: failed or healthy (drained is an operator's flag)."""
    return Health.FAILED if health == Health.FAILED else Health.HEALTHY


class InventoryOps(StoreBase):
    """The inventory as the cluster spec says it is."""

    def sync_inventory(self, cluster: Cluster, accept_removals: bool = True) -> InventoryChange:
        """Make the stored machines, pools, devices and links the spec's; keep health and drain flags.

        SpecError, changing nothing, where the spec would remove or shrink what a live slice holds. Rows
        go in as bulk statements and only the spec's columns are read back: one ORM object per row took
        11 s for a 12,500-machine spec (78,000 rows)."""
        nodes, devices, links = _rows(cluster)
        health = {d.id: _stored_health(d.health) for d in cluster.devices}
        with self.write() as s:
            conn = s.connection()
            stored_nodes = _read(conn, MachineRow, "name", _MACHINE_COLUMNS)
            m = diff(stored_nodes, nodes, "name", _MACHINE_COLUMNS)
            kinds = {name: row[0] for name, row in stored_nodes.items()}  # machine | pool (_MACHINE_COLUMNS[0])
            kinds.update((row["name"], row["kind"]) for row in nodes)
            stored = _read(conn, DeviceRow, "id", _DEVICE_COLUMNS)
            d = diff(stored, devices, "id", _DEVICE_COLUMNS)
            lk = diff(_read(conn, LinkRow, "id", ("gbps",)), links, "id", ("gbps",))
            if m.rewrites or d.rewrites:
                problems = held_conflicts(m, d, live_slices_held(conn)[1])
                if problems:
                    raise SpecError("cluster spec", [*problems, "end those jobs first (disagg cancel), or keep "
                                                                "what they hold in the spec as it is"])
            if (m.removed or d.removed) and not accept_removals:
                raise SpecError("cluster spec", [_removals(m.removed, d.removed, kinds)])
            replaced = _replaced(stored, d)
            for row in [*d.added, *(d.changed[k] for k in replaced)]:
                row.update(health=health[row["id"]], drained=False, slice_id=None)
            for row in lk.added:
                row.update(up=True)  # a new link starts up
            # a link's bandwidth is no row the version counts: its change renumbers the machines
            _apply(s, MachineRow, MachineRow.name, m, nodes, "name", renumber=m.rewrites or lk.rewrites)
            _apply(s, DeviceRow, DeviceRow.id, d, devices, "id", renumber=d.rewrites)
            _apply(s, LinkRow, LinkRow.id, lk, None, "id", renumber=False)
        return InventoryChange(_keys(m, "name", lambda n: kinds[n] == "machine"), _keys(d, "id"), _keys(lk, "id"),
                               _keys(m, "name", lambda n: kinds[n] == "pool"), replaced)


def _keys(change: Diff, key: str, which: Callable[[str], bool] = lambda _: True
          ) -> tuple[list[str], list[str], list[str]]:
    return ([r[key] for r in change.added if which(r[key])], [k for k in change.changed if which(k)],
            [k for k in change.removed if which(k)])


def _replaced(stored: Mapping[str, tuple[Any, ...]], devices: Diff) -> list[str]:
    """The changed devices that are another device under the same id: another kind, model or place. A spec
    numbers a pool's devices by position (`iobox0/gpu2` is its third GPU), so taking two P100s out of
    `{P100: 4, P40: 1}` makes the P40 `gpu2`: it must not inherit the P100's health and drain flag (a
    failed P40 would look healthy, a drained P100's flag would hold the P40 back); it gets the spec's."""
    return [k for k, row in devices.changed.items()
            if stored[k][:3] != (row["kind"], row["model"], row["location"])]


def _read(conn: Connection, model: Any, key: str, columns: tuple[str, ...]) -> dict[str, tuple[Any, ...]]:
    cols = [getattr(model, c) for c in columns]
    return {row[0]: tuple(row[1:]) for row in conn.execute(select(getattr(model, key), *cols))}


def _apply(s: Session, model: Any, key_column: Any, change: Diff, order: list[dict[str, Any]] | None,
           key: str, renumber: bool) -> None:
    """Delete, update and insert as `change` says. Machines and devices (`order`: the spec's rows) are
    numbered in the spec's order: from 0 on the first sync; past the last stored position where
    `renumber` (a rewrite), so that the inventory's version moves; added rows alone go after the last one."""
    if change.removed:
        s.execute(delete(model).where(key_column.in_(change.removed)))
    for k, row in change.changed.items():
        s.execute(update(model).where(key_column == k).values({c: v for c, v in row.items() if c != key}))
    if order is None:
        if change.added:
            s.execute(insert(model), change.added)
        return
    last = s.execute(select(func.coalesce(func.max(model.position), -1))).scalar_one()
    start = 0 if last < 0 else last + 1
    position = {row[key]: start + i for i, row in enumerate(order)}
    if change.added:
        s.execute(insert(model), [{**row, "position": position[row[key]]} for row in change.added])
    if renumber:
        added = {row[key] for row in change.added}
        s.execute(update(model), [{key: k, "position": p} for k, p in position.items() if k not in added])
