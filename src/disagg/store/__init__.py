"""Persistent state of the controller (SQLAlchemy 2): SQLite (WAL) by default, PostgreSQL by URL.

The schema comes from the Alembic migrations in `disagg.store.migrations`; `Store.migrate()` runs
them at start. `repository` holds the transactions and the writes, `views` the named reads that the
API, the dashboard and the metrics show (see README.md).
"""

from disagg.store import views
from disagg.store.repository import (
    DEFAULT_URL,
    LIVE_SLICE_STATES,
    IdempotencyConflict,
    Principal,
    Store,
    new_id,
    normalize_url,
)
from disagg.store.views import device_dict, job_dict, slice_dict

__all__ = [
    "DEFAULT_URL",
    "LIVE_SLICE_STATES",
    "IdempotencyConflict",
    "Principal",
    "Store",
    "device_dict",
    "job_dict",
    "new_id",
    "normalize_url",
    "slice_dict",
    "views",
]
