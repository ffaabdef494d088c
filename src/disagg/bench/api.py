"""`disagg bench api` (placeholder until the benchmark lands)."""

from __future__ import annotations


def bench_api() -> None:
    """Job submissions per second and p99 latency of POST /v1/jobs (JSON out)."""
