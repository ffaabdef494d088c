"""Alembic migrations of the controller store (run at start by `disagg.store.migrate`)."""
