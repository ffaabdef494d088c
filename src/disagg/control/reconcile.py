"""Reconciliation after a restart: make the store, the fabric and the engine agree again.

The store is the record of intent; the fabric and the engine are the world. After a controller
dies at any moment (even by SIGKILL), before the loop runs again:
  - a fabric attachment that no live slice holds on that machine is detached (nothing stays
    attached without a slice);
  - a device the store shows held by a slice that is gone is freed;
  - a job directory on the engine whose slice is gone is cancelled (nothing runs without a slice);
  - a job that shows composing/running without a live slice is re-queued.
Slices that were composing or tearing down are not touched here: the loop resumes them from their
recorded steps, each of which is idempotent. Running slices are polled as usual; a job the engine
lost sends its slice to teardown and the job back to the queue.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from sqlalchemy import select

from disagg.engines.base import Engine
from disagg.fabric.base import FabricDriver
from disagg.store import LIVE_SLICE_STATES, Store
from disagg.store.models import DeviceRow, JobRow, SliceRow

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    detached: list[str] = field(default_factory=list)
    freed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # slice machines without a live slice, made to leave
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"reconciled in {self.seconds:.3f}s: {len(self.resumed)} slices to resume, "
            f"{len(self.detached)} orphan attachments detached, {len(self.freed)} devices freed, "
            f"{len(self.cancelled)} orphan jobs stopped, {len(self.requeued)} jobs re-queued"
        )


def reconcile(store: Store, fabric: FabricDriver, engine: Engine) -> ReconcileReport:
    """Bring fabric, engine and store back in line (see the module docstring). Idempotent."""
    t0 = time.perf_counter()
    report = ReconcileReport()
    with store.read() as s:
        live = {r.id: r for r in s.scalars(select(SliceRow).where(SliceRow.state.in_(LIVE_SLICE_STATES)))}
        holds: dict[str, str] = {}  # device → host machine, for live slices
        for sl in live.values():
            for m in sl.placement.get("machines", []):
                for dev in m.get("devices", []):
                    holds[dev] = m["host"]
        report.resumed = [sid for sid, r in live.items() if r.state in ("composing", "tearing-down")]
    for a in fabric.attachments():
        if holds.get(a.device) != a.machine:
            fabric.detach(a.device, a.machine)
            report.detached.append(a.device)
    with store.write() as s:
        for dev in s.scalars(select(DeviceRow).where(DeviceRow.slice_id.is_not(None))):
            if dev.slice_id not in live:
                report.freed.append(dev.id)
                dev.slice_id = None
        now = time.time()
        for job in s.scalars(select(JobRow).where(JobRow.state.in_(("composing", "running")))):
            if job.slice_id not in live:
                job.state, job.reason, job.reason_code = "queued", "re-queued: its slice was gone", "requeued"
                job.updated_at = now
                report.requeued.append(job.id)
    handles = getattr(engine, "handles", None)
    if callable(handles):
        for h in handles():
            if h not in live and engine.status(h).state in ("running", "pending", "held"):
                engine.cancel(h)
                report.cancelled.append(h)
    # engines whose slice machines exist outside this process (Slurm nodes) are asked which are orphans
    leave_orphans = getattr(engine, "leave_orphan_machines", None)
    if callable(leave_orphans):
        keep = {m["name"] for r in live.values() for m in r.placement.get("machines", [])}
        report.left = list(leave_orphans(keep))
    report.seconds = time.perf_counter() - t0
    log.info(report.summary())
    return report
