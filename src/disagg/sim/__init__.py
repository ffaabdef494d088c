"""disagg.sim."""
