"""Prometheus metrics of one controller, in a registry of its own (several controllers per process in tests).

Histograms are observed as things happen (step latencies, placement rounds, API submissions);
gauges (queue length, slices by state, devices by state) are read from the store at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from disagg.store import Store
from disagg.store.models import JOB_STATES, SLICE_STATES

_STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _StoreCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self.store.counts()
        queue = GaugeMetricFamily("disagg_queue_length", "Jobs waiting to be placed.")
        queue.add_metric([], counts["jobs"].get("queued", 0))
        yield queue
        jobs = GaugeMetricFamily("disagg_jobs", "Jobs by state.", labels=["state"])
        for st in JOB_STATES:
            jobs.add_metric([st], counts["jobs"].get(st, 0))
        yield jobs
        slices = GaugeMetricFamily("disagg_slices", "Slices by state.", labels=["state"])
        for st in SLICE_STATES:
            slices.add_metric([st], counts["slices"].get(st, 0))
        yield slices
        devices = GaugeMetricFamily("disagg_devices", "Devices by state.", labels=["state"])
        for st in ("free", "attached", "failed", "drained"):
            devices.add_metric([st], counts["devices"].get(st, 0))
        yield devices


class ControllerMetrics:
    """The controller's metrics; `render()` is the body of GET /metrics."""

    def __init__(self, store: Store) -> None:
        self.registry = CollectorRegistry()
        self.step_seconds = Histogram(
            "disagg_slice_step_seconds",
            "Latency of slice steps by operation.",
            ["op"],
            buckets=_STEP_BUCKETS,
            registry=self.registry,
        )
        self.round_seconds = Histogram(
            "disagg_placement_round_seconds",
            "Wall time of one scheduling round.",
            buckets=_STEP_BUCKETS,
            registry=self.registry,
        )
        self.submit_seconds = Histogram(
            "disagg_submit_seconds",
            "Latency of POST /v1/jobs in the handler.",
            buckets=_STEP_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StoreCollector(store))

    def observe_step(self, op: str, seconds: float) -> None:
        self.step_seconds.labels(op).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
