"""Fabric drivers by name (`fabric: {driver: emulated}` in the controller's config), one table.

`emulated` is the default: the seed's PCIe-over-Ethernet testbed emulated on a state file beside
the store, with the testbed's operation latencies. `redfish` composes slices on composable hardware
through a DMTF Redfish CompositionService (`disagg.fabric.redfish`). A driver factory takes the cluster, the state
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


#: The `redfish` driver's options: name → (type, what it is). `url` is required.
REDFISH_OPTIONS: dict[str, tuple[type, str]] = {
    "url": (str, "the service's base URL, http(s)://host[:port]"),
    "username": (str, "the user to log in as"),
    "password": (str, "the password (prefer password_file)"),
    "password_file": (str, "a file holding the password"),
    "insecure": (bool, "skip TLS certificate verification (default false)"),
    "ca_file": (str, "a CA bundle to verify the service's certificate with"),
    "marker": (str, "names this disagg in the compositions it makes (default disagg@<hostname>)"),
    "timeout_s": (float, "timeout of one request, seconds (default 10)"),
    "retries": (int, "retries of a request after a 5xx or a connection error (default 4)"),
    "backoff_s": (float, "first backoff between retries, doubling (default 0.2)"),
    "task_timeout_s": (float, "how long a task (202) may run, seconds (default 300)"),
    "poll_s": (float, "how often block health and holdings are read, seconds (default 2)"),
}


def check_redfish_options(options: Mapping[str, Any]) -> None:
    """UnknownDriverError naming the first option that is unknown, of the wrong type, or missing."""
    for key, value in options.items():
        if key not in REDFISH_OPTIONS:
            raise UnknownDriverError(f"fabric.{key}: unknown option for the 'redfish' driver; known: "
                                     f"{', '.join(REDFISH_OPTIONS)}")
        kind, what = REDFISH_OPTIONS[key]
        ok = isinstance(value, bool) if kind is bool else (
            isinstance(value, int | float) and not isinstance(value, bool) and value >= 0) if kind in (int, float) \
            else isinstance(value, str) and bool(value)
        if not ok:
            raise UnknownDriverError(f"fabric.{key}: {value!r} is not allowed; expected {kind.__name__}: {what}")
    url = options.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise UnknownDriverError(f"fabric.url: {url!r} is not allowed; the 'redfish' driver needs "
                                 "url: http(s)://host[:port] of the Redfish service")
    if "password" in options and "password_file" in options:
        raise UnknownDriverError("fabric.password: give password or password_file, not both")


def _redfish(opts: DriverOptions) -> FabricDriver:
    from disagg.fabric.redfish import make_redfish

    check_redfish_options(opts.options)
    return make_redfish(opts.cluster, opts.options)


DRIVERS: dict[str, Callable[[DriverOptions], FabricDriver]] = {"emulated": _emulated, "redfish": _redfish}


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


__all__ = ["DRIVERS", "REDFISH_OPTIONS", "DriverOptions", "UnknownDriverError", "check_redfish_options",
           "make_driver", "register_driver"]
