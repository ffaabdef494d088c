"""The store: one database (SQLite in WAL mode by default, PostgreSQL by URL) and the named operations on it.

`Store` is the one object the controller and the API hold. Its operations are grouped by concept,
one module each: `base` (engines, transactions), `snapshot` (what a round plans on), `plans`
(committing a round), `jobs`, `slices` (steps and moves), `health` (the fabric's health),
`lifecycle` (the guarded transitions and their events), `tenants` (overrides, holdings, decayed usage,
preemptions), `inventory` (the cluster spec's machines, devices and links).
No module outside `disagg.store` speaks SQL.
"""

from __future__ import annotations

from disagg.store.backup import BackupOps
from disagg.store.compositions import CompositionOps
from disagg.store.gc import GcOps
from disagg.store.health import HealthOps
from disagg.store.history import HistoryOps
from disagg.store.inventory import InventoryOps
from disagg.store.jobs import JobOps
from disagg.store.lease import LeaseOps
from disagg.store.marks import MarkOps
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
            PrefixOps, TenantOps, MarkOps, GcOps, BackupOps, ProfileOps, OperatorOps, LeaseOps, InventoryOps):
    """The controller's database and its named operations. Thread-safe: every call opens its own session."""
