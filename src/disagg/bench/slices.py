"""`disagg bench slices` (placeholder until the benchmark lands)."""

from __future__ import annotations


def bench_slices() -> None:
    """Slice composition, parallel vs serial steps (JSON out)."""
