"""disagg.api."""
