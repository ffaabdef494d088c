"""Fabric drivers by name (`fabric: {driver: emulated}` in the controller's config), one table.

`emulated` is the default: the seed's PCIe-over-Ethernet testbed emulated on a state file beside
the store, with the testbed's operation latencies. A driver factory takes the cluster, the state
directory, the latencies and the driver's own options (the rest of the `fabric:` mapping) and
refuses options it does not know, naming them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from disagg.fabric.base import FabricDriver
from disagg.fabric.emulated import OperationLatencies
from disagg.model import Cluster, SpecError


class UnknownDriverError(SpecError):
    """A driver name or its options are not usable; the message names the field and what is allowed."""

    def __init__(self, message: str) -> None:
        super().__init__("fabric settings", [message])


@dataclass(frozen=True)
class DriverOptions:
    """What any driver may need from the controller's settings."""

    cluster: Cluster
    state_dir: Path
    latencies: OperationLatencies
    options: Mapping[str, Any] = field(default_factory=dict)  # the driver's own keys of `fabric:`


def _emulated(opts: DriverOptions) -> FabricDriver:
    from disagg.fabric.emulated import EmulatedFabric

    if opts.options:
        raise UnknownDriverError(f"fabric.{sorted(opts.options)[0]}: unknown option for the 'emulated' driver "
                                 "(it takes none)")
    return EmulatedFabric(opts.state_dir / "fabric.db", opts.cluster, opts.latencies)


DRIVERS: dict[str, Callable[[DriverOptions], FabricDriver]] = {"emulated": _emulated}


def register_driver(name: str, factory: Callable[[DriverOptions], FabricDriver]) -> None:
    """Add a driver; a name is registered once (a second registration is a programming error)."""
    if name in DRIVERS:
        raise ValueError(f"fabric driver {name!r} is already registered")
    DRIVERS[name] = factory


def make_driver(name: str, opts: DriverOptions) -> FabricDriver:
    """The driver called `name`; UnknownDriverError naming the known ones otherwise."""
    factory = DRIVERS.get(name)
    if factory is None:
        raise UnknownDriverError(f"fabric.driver: unknown driver {name!r}; known: {', '.join(sorted(DRIVERS))}")
    return factory(opts)


__all__ = ["DRIVERS", "DriverOptions", "UnknownDriverError", "make_driver", "register_driver"]
