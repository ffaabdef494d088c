"""Persistent state of the controller (SQLAlchemy 2): SQLite (WAL) by default, PostgreSQL by URL.

The only package that speaks SQL. The schema comes from the Alembic migrations in
`disagg.store.migrations`; `Store.migrate()` runs them at start. See README.md for the file map.
"""

from disagg.model.states import LIVE_SLICE_STATES
from disagg.store.base import DEFAULT_URL, UNAVAILABLE, DuplicateKey, StoreError, normalize_url
from disagg.store.compositions import CompositionRefused, Inventory, LiveSlice
from disagg.store.health import FabricHealth
from disagg.store.jobs import IdempotencyConflict, JobLive, JobSummary, job_dict, model_job, new_id, new_job_row
from disagg.store.plans import CommitResult, slice_placement
from disagg.store.repository import Store
from disagg.store.slices import (
    DropDevice,
    KeepHandle,
    ReleaseDevice,
    SliceAborted,
    SliceRecord,
    SliceRunning,
    StepEffect,
    StepRecord,
)
from disagg.store.tenants import PreemptionRecord
from disagg.store.tokens import Principal
from disagg.store.views import device_dict, slice_dict

__all__ = [
    "DEFAULT_URL",
    "LIVE_SLICE_STATES",
    "UNAVAILABLE",
    "CommitResult",
    "CompositionRefused",
    "DropDevice",
    "DuplicateKey",
    "FabricHealth",
    "IdempotencyConflict",
    "Inventory",
    "JobLive",
    "JobSummary",
    "KeepHandle",
    "LiveSlice",
    "PreemptionRecord",
    "Principal",
    "ReleaseDevice",
    "SliceAborted",
    "SliceRecord",
    "SliceRunning",
    "StepEffect",
    "StepRecord",
    "Store",
    "StoreError",
    "device_dict",
    "job_dict",
    "model_job",
    "new_id",
    "new_job_row",
    "normalize_url",
    "slice_dict",
    "slice_placement",
]
