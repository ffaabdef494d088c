"""The fabric driver interface: attach and detach devices to machines, report health.

The emulated fabric is the default driver, not a mock; real ones (PCIe-over-Ethernet, remoting,
CXL) go behind the same interface. attach and detach are idempotent: attaching a device that is
already attached to the same machine succeeds; detaching one that is not attached succeeds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from disagg.model import Allocation, Cluster, SliceMachine

Mechanism = Literal["local", "pcie-over-ethernet", "remoting", "cxl"]


class FabricError(RuntimeError):
    """An operation failed (timeout, device failed, link down). `retryable` says if a retry may help."""

    def __init__(self, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class AttachmentInfo:
    device: str
    machine: str
    mechanism: Mechanism


@dataclass(frozen=True)
class FabricHoldings:
    """What others hold on a fabric disagg shares (a Redfish service other clients compose on): devices,
    and machines taken whole (their Compute block is in someone else's composition)."""

    devices: frozenset[str] = field(default_factory=frozenset)
    machines: frozenset[str] = field(default_factory=frozenset)
    holder: str = "fabric"  # who, as the snapshot's allocations name it (`foreign:<holder>`)


def with_fabric_holdings(snapshot: Cluster, held: FabricHoldings) -> Cluster:
    """The snapshot with what others hold on the fabric added as allocations, so no policy offers it: a
    machine taken whole loses the cpus and memory it has left, a device is held (charged to no cpus)."""
    if not held.devices and not held.machines:
        return snapshot
    cpus = {m.name: m.cpus for m in snapshot.machines}
    memory = {m.name: m.memory_gb for m in snapshot.machines}
    holders: dict[str, str] = {}
    for a in snapshot.allocations:
        cpus[a.machine] = cpus.get(a.machine, 0.0) - a.cpus
        memory[a.machine] = memory.get(a.machine, 0.0) - a.memory_gb
        holders.update(dict.fromkeys(a.devices, a.job))
    job = f"foreign:{held.holder}"
    extra = [Allocation(job, m, max(cpus[m], 0.0), max(memory[m], 0.0)) for m in sorted(held.machines) if m in cpus]
    devices = tuple(d for d in sorted(held.devices) if d in snapshot.device_by_id and d not in holders)
    if devices and snapshot.machines:
        extra.append(Allocation(job, snapshot.machines[0].name, 0.0, 0.0, devices))
    return replace(snapshot, allocations=snapshot.allocations + tuple(extra)) if extra else snapshot


class FaultInjection(ABC):
    """An optional capability of a driver: break and mend parts on request (tests, drills, demos).

    The emulated fabric has it; a driver of real hardware has none (`FabricDriver.faults` is None),
    and the controller then answers an operator's fail/repair with a clear refusal.
    """

    @abstractmethod
    def fail_device(self, device: str) -> None:
        """The device breaks; it stays attached (hardware does not detach itself) until detached."""

    @abstractmethod
    def repair_device(self, device: str) -> None:
        """The device works again."""

    @abstractmethod
    def drop_link(self, link: str) -> None:
        """The link goes down: devices behind it are unreachable until it is restored."""

    @abstractmethod
    def restore_link(self, link: str) -> None:
        """The link is back."""


class FabricDriver(ABC):
    """What the controller calls on a fabric: attach, detach, what is attached, health and load.

    Drivers register by name in `disagg.fabric.registry.DRIVERS`.
    """

    name: str = "base"

    @abstractmethod
    def attach(self, device: str, machine: str, mechanism: Mechanism, gbps: float = 0.0,
               slice_machine: SliceMachine | None = None) -> AttachmentInfo:
        """Give `device` to `machine`, reserving `gbps` on the links of its path. Idempotent for the
        same pair; an error if held by another, or if a link on the path lacks the bandwidth.

        `slice_machine`: the slice machine the device is for (a composing driver composes per slice machine)."""

    @abstractmethod
    def detach(self, device: str, machine: str, slice_machine: SliceMachine | None = None) -> None:
        """Take it back. Idempotent."""

    @abstractmethod
    def attachments(self) -> list[AttachmentInfo]:
        """What the fabric itself says is attached now (for reconciliation after a restart)."""

    @abstractmethod
    def healthy(self, device: str) -> bool:
        """Whether the device works."""

    @abstractmethod
    def failed_devices(self) -> set[str]:
        """Devices the fabric reports broken (the health monitor mirrors these)."""

    @abstractmethod
    def down_links(self) -> set[str]:
        """Links the fabric reports down (`up:<node>`, `rack:<rack>`)."""

    @abstractmethod
    def link_load(self) -> dict[str, float]:
        """Gbit/s the attachments reserve on each link (for metrics); every link the fabric knows."""

    # --- composable hardware: optional hooks (a fabric that attaches devices to running machines needs none)
    def compose(self, machine: SliceMachine) -> None:  # noqa: B027 - an optional hook, not abstract
        """launch-machine's fabric half, before the engine's: make the slice machine a machine of the
        fabric with its devices (composable hardware composes a system). Idempotent."""

    def decompose(self, machine: SliceMachine) -> None:  # noqa: B027 - an optional hook, not abstract
        """destroy-machine's fabric half, after the engine's: unmake what `compose` made. Idempotent."""

    def adopt(self, machines: Mapping[str, str]) -> list[str]:
        """After a restart: keep what `compose` made for the live slice machines (`machines`: name → host),
        unmake the rest that this driver made (never what others made). Returns those unmade."""
        return []

    def fence(self, epoch: int, force: bool = False) -> None:  # noqa: B027 - an optional hook, not abstract
        """From now on this driver acts for the controller of lease `epoch` (`control.leadership`). A
        fabric that keeps the highest epoch it was told (a fencing token) refuses, from then on, the
        attaches and detaches of a driver told an older one: a leader paused in the middle of an attach
        must not land it after another replica took over and reconciled. FabricError if it was told a
        newer epoch already, unless `force` (an operator accepted a store that went back)."""

    def holdings(self) -> FabricHoldings:
        """What others hold on the fabric now (a shared service); the policies are not offered it."""
        return FabricHoldings()

    @property
    def faults(self) -> FaultInjection | None:
        """The driver's fault injection, if it has one."""
        return None

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Stop background work."""
