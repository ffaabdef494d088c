"""disagg.control."""
