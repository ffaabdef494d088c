"""The health monitor: LegoOS's per-component monitors reporting to a global manager.

The fabric is the truth about which devices failed and which links dropped; the monitor mirrors it
into the store and sends the slices a failure hits to teardown (their jobs are re-queued, or fail
by their own retry policy). Nothing else is touched: a failure is contained to the slices that use
the failed part. The scheduling loop looks every tick (and does nothing while the fabric's health
is what it last saw); an operator's fault injection or repair goes through the same path, so the
two can never undo each other (see `disagg.store.health`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from disagg.fabric.base import FabricDriver, FaultInjection
from disagg.model.states import SliceOutcome
from disagg.store import FabricHealth, Store

log = logging.getLogger(__name__)


class NoFaultInjection(ValueError):
    """The fabric driver cannot fail or repair parts on request (real hardware); names the driver."""


class HealthMonitor:
    """Mirrors the fabric's health into the store; re-queues what a failure hits."""

    def __init__(self, store: Store, fabric: FabricDriver) -> None:
        self.store = store
        self.fabric = fabric
        self._seen: FabricHealth | None = None

    def health(self) -> FabricHealth:
        return frozenset(self.fabric.failed_devices()), frozenset(self.fabric.down_links())

    def look(self) -> bool:
        """Mirror the fabric's health if it changed since the last look (the first look after a start
        always mirrors); whether it changed."""
        if self.health() == self._seen:
            return False
        self.change(lambda _faults: None)
        return True

    def change(self, action: Callable[[FaultInjection], None], repaired: str | None = None) -> None:
        """Apply `action` to the fabric's fault injection (nothing, for a plain look), then mirror the
        fabric's health in the same serialized transaction and tear down the slices it hits.

        `repaired`: a device the operator repaired (healthy and no longer drained in the store).
        """

        seen: list[FabricHealth] = []

        def act_and_look() -> FabricHealth:
            faults = self.fabric.faults
            if faults is not None:
                action(faults)
            seen.append(self.health())
            return seen[-1]

        victims = self.store.mirror_health(act_and_look, repaired)
        for slice_id, why in victims.items():
            if self.store.abort_slice(slice_id, SliceOutcome.REQUEUE, why):
                log.warning("slice %s: %s; job re-queued", slice_id, why)
        self._seen = seen[-1]

    def inject(self, action: Callable[[FaultInjection], None], repaired: str | None = None) -> None:
        """An operator's fault injection or repair; NoFaultInjection when the driver has none."""
        if self.fabric.faults is None:
            raise NoFaultInjection(f"the {self.fabric.name!r} fabric driver cannot fail or repair parts on request")
        self.change(action, repaired)


__all__ = ["HealthMonitor", "NoFaultInjection"]
