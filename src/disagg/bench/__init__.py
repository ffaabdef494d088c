"""disagg.bench."""
