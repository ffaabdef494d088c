"""The store: one database (SQLite in WAL mode by default, PostgreSQL by URL) and the named operations on it.

`Store` is the one object the controller and the API hold. Its operations are grouped by concept,
one module each: `base` (engines, transactions), `snapshot` (what a round plans on), `plans`
(committing a round), `jobs`, `slices` (steps and moves), `health` (the fabric's health),
`lifecycle` (the guarded transitions and their events), `tenants` (overrides, holdings, decayed usage,
preemptions), and here the tokens and the inventory.
No module outside `disagg.store` speaks SQL.
"""

from __future__ import annotations

from sqlalchemy import insert, select

from disagg.model import Cluster
from disagg.model.states import Health
from disagg.store.backup import BackupOps
from disagg.store.compositions import CompositionOps
from disagg.store.gc import GcOps
from disagg.store.health import HealthOps
from disagg.store.history import HistoryOps
from disagg.store.jobs import JobOps
from disagg.store.lease import LeaseOps
from disagg.store.marks import MarkOps
from disagg.store.models import (
    DeviceRow,
    LinkRow,
    MachineRow,
)
from disagg.store.operator import OperatorOps
from disagg.store.plans import PlanOps
from disagg.store.prefixes import PrefixOps
from disagg.store.profiles import ProfileOps
from disagg.store.slices import SliceOps
from disagg.store.snapshot import SnapshotOps
from disagg.store.tenants import TenantOps
from disagg.store.tokens import TokenOps
from disagg.store.views import ViewOps


class Store(SnapshotOps, JobOps, SliceOps, PlanOps, HealthOps, TokenOps, ViewOps, CompositionOps, HistoryOps,
            PrefixOps, TenantOps, MarkOps, GcOps, BackupOps, ProfileOps, OperatorOps, LeaseOps):
    """The controller's database and its named operations. Thread-safe: every call opens its own session."""

    # --- inventory -------------------------------------------------------------------------
    def sync_inventory(self, cluster: Cluster) -> None:
        """Add the spec's machines, pools, devices and links that the store lacks; keep health.

        Rows go in as bulk INSERTs and only the key columns are read back: one ORM object per row
        took 11 s for a 12,500-machine spec (78,000 rows).
        """
        nodes = [
            {"name": m.name, "kind": "machine", "rack": m.rack, "cpus": m.cpus, "memory_gb": m.memory_gb,
             "uplink_gbps": m.uplink_gbps, "position": i}
            for i, m in enumerate(cluster.machines)
        ] + [
            {"name": p.name, "kind": "pool", "rack": p.rack, "cpus": 0.0, "memory_gb": 0.0,
             "uplink_gbps": p.uplink_gbps, "position": len(cluster.machines) + i}
            for i, p in enumerate(cluster.pools)
        ]
        devices = [
            {"id": d.id, "kind": d.kind, "model": d.model, "location": d.location, "index": d.index,
             "capacity": d.capacity, "health": _stored_health(d.health), "drained": False,
             "slice_id": None, "position": i}
            for i, d in enumerate(cluster.devices)
        ]
        links = [{"id": lk.id, "gbps": lk.gbps, "up": True} for lk in cluster.links]
        with self.write() as s:
            for model, key, rows in ((MachineRow, "name", nodes), (DeviceRow, "id", devices), (LinkRow, "id", links)):
                have = set(s.scalars(select(getattr(model, key))))
                missing = [r for r in rows if r[key] not in have]
                if missing:
                    s.execute(insert(model), missing)


def _stored_health(health: str) -> Health:
    """A spec's device health as the store keeps it: failed or healthy (drained is an operator's flag)."""
    return Health.FAILED if health == Health.FAILED else Health.HEALTHY
