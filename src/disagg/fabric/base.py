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


class FabricDriver(ABC):
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

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Stop background work."""
