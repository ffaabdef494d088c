"""The model: immutable dataclasses for the cluster and the jobs, and the specs users write."""

from disagg.model.cluster import (
    DEVICE_KINDS,
    Allocation,
    Cluster,
    Device,
    DeviceKind,
    Link,
    Machine,
    Pool,
    Reach,
    device_id,
)
from disagg.model.errors import SpecError
from disagg.model.jobs import Job, TaskRequest
from disagg.model.slices import PlacedDevice, PlacedTask, SliceMachine, SlicePlacement
from disagg.model.spec import load_cluster, load_jobs, never_fits, parse_cluster, parse_jobs

__all__ = [
    "DEVICE_KINDS",
    "Allocation",
    "Cluster",
    "Device",
    "DeviceKind",
    "Job",
    "Link",
    "Machine",
    "PlacedDevice",
    "PlacedTask",
    "Pool",
    "Reach",
    "SliceMachine",
    "SlicePlacement",
    "SpecError",
    "TaskRequest",
    "device_id",
    "load_cluster",
    "load_jobs",
    "never_fits",
    "parse_cluster",
    "parse_jobs",
]
