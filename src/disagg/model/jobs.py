"""Jobs and their tasks: what a user asks for.

A job is a gang of `count` identical tasks. Each task asks for server-centric resources (cpus,
memory) on one machine and for disaggregable devices (gpu, nvme, fpga, memory) that may be local
or remote. `importance` is the paper's z in [1, 10], 1 being the most important.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from disagg.model.cluster import DEVICE_KINDS, DeviceKind

if TYPE_CHECKING:
    from disagg.profiles.model import Profile

#: Jobs one batch submission may carry (POST /v1/job-batches, `disagg submit --count`): one request, one
#: transaction, bounded like every size a tenant controls.
MAX_BATCH = 100


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """What each task of a job needs. `devices` maps a kind to a count; `models` may pin a kind's model."""

    count: int = 1
    cpus: float = 1.0
    memory_gb: float = 1.0
    devices: Mapping[str, int] = field(default_factory=dict)
    models: Mapping[str, str] = field(default_factory=dict)
    #: `kinds`, worked out once: policies ask for it per job and per task, every round.
    _kinds: tuple[DeviceKind, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "_kinds", tuple(k for k in DEVICE_KINDS if self.devices.get(k, 0) > 0))

    def wants(self, kind: str) -> int:
        return int(self.devices.get(kind, 0))

    @property
    def kinds(self) -> tuple[DeviceKind, ...]:
        """The disaggregable kinds this request uses, in phase order."""
        return self._kinds


@dataclass(frozen=True, slots=True)
class Job:
    """A job waiting in the queue.

    `wait_rounds` is the paper's W: how many scheduling rounds the job has been left unscheduled.
    The caller (simulator or controller) raises it with `waited()`; policies only read it.
    `network_gbps`, when given, overrides the profile's bandwidth demand per remote device.
    `tenant` is who submitted it (quotas and fair share are per tenant); a job that is not
    `preemptible` is never preempted, and so may not borrow above its tenant's nominal quota.
    `profile`, when given, is what the caller knows of the job's image (an operator's table, a learned
    estimate); None: the shipped table's entry, or the neutral profile (`profiles.lookup`).
    """

    name: str
    image: str
    tasks: TaskRequest
    submit_s: float = 0.0
    importance: float = 1.0
    slo_s: float | None = None
    wait_rounds: int = 0
    network_gbps: float | None = None
    command: tuple[str, ...] = ()
    tenant: str = "default"
    preemptible: bool = True
    profile: Profile | None = None

    def waited(self) -> Job:
        """The same job after one more round unscheduled (W + 1)."""
        return replace(self, wait_rounds=self.wait_rounds + 1)
