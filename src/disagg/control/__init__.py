"""The controller: the slice lifecycle, the scheduling loop, reconciliation after restart (see README.md)."""
