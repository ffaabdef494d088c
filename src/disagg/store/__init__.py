"""disagg.store."""
