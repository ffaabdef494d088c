"""The model: immutable dataclasses for the cluster and the jobs, and the specs users write.

The specs' readers (`load_cluster`, `load_jobs`, ...) are loaded on first use: they bring Pydantic and
YAML, and every `disagg` command imports this package for its constants (a client command such as `disagg
jobs` reads none of the specs)."""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from disagg.model.spec import load_cluster, load_jobs, never_fits, parse_cluster, parse_jobs

#: What `disagg.model.spec` gives this package, loaded when first asked for (`__getattr__`).
_SPEC = frozenset({"load_cluster", "load_jobs", "never_fits", "parse_cluster", "parse_jobs"})


def __getattr__(name: str) -> Any:
    if name in _SPEC:
        from disagg.model import spec

        return getattr(spec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
