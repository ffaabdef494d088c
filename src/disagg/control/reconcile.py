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

from disagg.engines.base import Engine
from disagg.fabric.base import FabricDriver
from disagg.model.states import SliceState
from disagg.store import Store

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    detached: list[str] = field(default_factory=list)
    freed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # slice machines without a live slice, made to leave
    decomposed: list[str] = field(default_factory=list)  # the fabric's compositions without a live slice
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
    live = store.live_slices()
    holds = {d.id: t.machine for r in live for t, d in r.placement.devices()}  # device → host, for live slices
    report.resumed = [r.id for r in live if r.state in (SliceState.COMPOSING, SliceState.TEARING_DOWN)]
    for a in fabric.attachments():
        if holds.get(a.device) != a.machine:
            fabric.detach(a.device, a.machine)
            report.detached.append(a.device)
    report.freed, report.requeued = store.reconcile_records({r.id for r in live})
    for h in engine.orphans({r.id for r in live} | {r.handle for r in live if r.handle}):
        engine.cancel(h)
        report.cancelled.append(h)
    # engines whose slice machines exist outside this process (Slurm nodes) keep only the live slices' ones;
    # so do fabrics that compose slice machines (Redfish): what they made for no live slice is decomposed
    report.left = engine.adopt({m.name for r in live for m in r.placement.machines})
    report.decomposed = fabric.adopt({m.name: m.host for r in live for m in r.placement.machines})
    report.seconds = time.perf_counter() - t0
    log.info(report.summary())
    return report
