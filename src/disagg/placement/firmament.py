"""`firmament`: server-centric flow scheduling — a task's devices must sit in its own machine."""

from __future__ import annotations

from disagg.placement.drmaestro import DRMaestroPolicy
from disagg.placement.flow import FlowOptions


class FirmamentPolicy(DRMaestroPolicy):
    """Firmament: min-cost flow, server-centric (a task's devices come from its own machine)."""

    name = "firmament"
    options = FlowOptions(name="firmament", cost_model="firmament")
