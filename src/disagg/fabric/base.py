"""The fabric driver interface: attach and detach devices to machines, report health.

The emulated fabric is the default driver, not a mock; real ones (PCIe-over-Ethernet, remoting,
CXL) go behind the same interface. attach and detach are idempotent: attaching a device that is
already attached to the same machine succeeds; detaching one that is not attached succeeds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

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
    def attach(self, device: str, machine: str, mechanism: Mechanism, gbps: float = 0.0) -> AttachmentInfo:
        """Give `device` to `machine`, reserving `gbps` on the links of its path. Idempotent for the
        same pair; an error if held by another, or if a link on the path lacks the bandwidth."""

    @abstractmethod
    def detach(self, device: str, machine: str) -> None:
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

    @property
    def faults(self) -> FaultInjection | None:
        """The driver's fault injection, if it has one."""
        return None

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Stop background work."""
