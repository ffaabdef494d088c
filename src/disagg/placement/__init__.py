"""Placement: policies that map queued jobs to machines and devices (pure; see README.md)."""

from disagg.placement.base import Clock, Policy, no_clock
from disagg.placement.decisions import (
    Decisions,
    DeviceGrant,
    JobPlacement,
    Reason,
    TaskPlacement,
    Unplaced,
)

__all__ = [
    "Clock",
    "Decisions",
    "DeviceGrant",
    "JobPlacement",
    "Policy",
    "Reason",
    "TaskPlacement",
    "Unplaced",
    "no_clock",
]
