"""Prometheus metrics of one controller, in a registry of its own (several controllers per process in tests).

Histograms are observed as things happen (step latencies, placement rounds, API submissions);
gauges (queue length, slices by state, devices by state, link load and health) are read from the
store and the fabric at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from disagg.fabric.base import FabricDriver
from disagg.model.states import DeviceState, JobState, SliceState
from disagg.store import Store

_STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _StoreCollector(Collector):
    def __init__(self, store: Store, fabric: FabricDriver | None = None) -> None:
        self.store = store
        self.fabric = fabric

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self.store.counts()
        queue = GaugeMetricFamily("disagg_queue_length", "Jobs waiting to be placed.")
        queue.add_metric([], counts["jobs"].get(JobState.QUEUED, 0))
        yield queue
        jobs = GaugeMetricFamily("disagg_jobs", "Jobs by state.", labels=["state"])
        for st in JobState:
            jobs.add_metric([st], counts["jobs"].get(st, 0))
        yield jobs
        slices = GaugeMetricFamily("disagg_slices", "Slices by state.", labels=["state"])
        for sst in SliceState:
            slices.add_metric([sst], counts["slices"].get(sst, 0))
        yield slices
        devices = GaugeMetricFamily("disagg_devices", "Devices by state.", labels=["state"])
        for dst in DeviceState:
            devices.add_metric([dst], counts["devices"].get(dst, 0))
        yield devices
        by_kind = self.store.device_counts("kind")
        kinds = GaugeMetricFamily("disagg_devices_by_kind", "Devices by kind and state (in use: attached).",
                                  labels=["kind", "state"])
        for kind in sorted({k for _, k in by_kind}):
            for dst in DeviceState:
                kinds.add_metric([kind, dst], by_kind.get((dst, kind), 0))
        yield kinds
        if self.fabric is not None:
            down = self.fabric.down_links()
            load = GaugeMetricFamily("disagg_link_load_gbps", "Bandwidth remote attachments take per link.",
                                     labels=["link"])
            up = GaugeMetricFamily("disagg_link_up", "1 when the link is up, 0 when it dropped.", labels=["link"])
            for link, gbps in sorted(self.fabric.link_load().items()):
                load.add_metric([link], gbps)
                up.add_metric([link], 0 if link in down else 1)
            yield load
            yield up


class ControllerMetrics:
    """The controller's metrics; `render()` is the body of GET /metrics.

    The loop's histograms (steps, rounds) sit in `loop_registry`, apart from the API's (submissions)
    and the store's gauges: when the API runs in a process of its own (`disagg.control.split`), the
    loop process publishes its part and `loop_text` reads it back.
    """

    def __init__(self, store: Store, fabric: FabricDriver | None = None) -> None:
        self.registry = CollectorRegistry()
        self.loop_registry = CollectorRegistry()
        self.loop_text: Callable[[], bytes] | None = None
        self.step_seconds = Histogram(
            "disagg_slice_step_seconds",
            "Latency of slice steps by operation.",
            ["op"],
            buckets=_STEP_BUCKETS,
            registry=self.loop_registry,
        )
        self.round_seconds = Histogram(
            "disagg_placement_round_seconds",
            "Wall time of one scheduling round.",
            buckets=_STEP_BUCKETS,
            registry=self.loop_registry,
        )
        self.replans = Counter(
            "disagg_placement_replans",
            "Re-plans on a fresh snapshot after a placement no longer fitted at commit (Nomad's refresh).",
            registry=self.loop_registry,
        )
        self.rounds_failed = Counter(
            "disagg_rounds_failed",
            "Scheduling rounds that failed (wholly, or until the jobs they failed on were set aside).",
            registry=self.loop_registry,
        )
        self.repeated_conflicts = Counter(
            "disagg_repeated_conflicts",
            "Commit conflicts that repeated for the same job in consecutive rounds: the policy's snapshot "
            "offered what the commit knows is not there (a bug; /healthz says degraded).",
            registry=self.loop_registry,
        )
        self.set_aside = Counter(
            "disagg_jobs_set_aside",
            "Jobs failed because planning them made a scheduling round fail.",
            registry=self.loop_registry,
        )
        self.submit_seconds = Histogram(
            "disagg_submit_seconds",
            "Latency of POST /v1/jobs in the handler.",
            buckets=_STEP_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StoreCollector(store, fabric))

    def observe_step(self, op: str, seconds: float) -> None:
        self.step_seconds.labels(op).observe(seconds)

    def render_loop(self) -> bytes:
        return generate_latest(self.loop_registry)

    def render(self) -> bytes:
        loop = self.loop_text() if self.loop_text is not None else self.render_loop()
        return generate_latest(self.registry) + loop
