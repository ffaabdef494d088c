"""Engines by name (`engine: local | slurm` in the controller's config), one table.

`local` runs tasks as processes on this host (the default, with the emulated testbed's latencies);
`slurm` runs them through a real Slurm described by a site file (`slurm_site: <path to site.json>`,
written by `disagg.engines.slurm_cluster.SlurmCluster` or by hand for an existing Slurm).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from disagg.engines.base import Engine
from disagg.fabric.emulated import OperationLatencies
from disagg.model import SpecError

if TYPE_CHECKING:
    from disagg.engines.local import Isolation


class UnknownEngineError(SpecError):
    """An engine name or its options are not usable; the message names the field and what is allowed.

    A `SpecError`, so `disagg serve` answers it as bad input (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__("engine settings", [message])


@dataclass(frozen=True)
class EngineOptions:
    """What any engine may need from the controller's settings."""

    state_dir: Path
    latencies: OperationLatencies
    slurm_site: str | None = None
    isolation: Isolation | None = None  # users and working directories (both engines); cgroups, log cap (local)


def _local(opts: EngineOptions) -> Engine:
    from disagg.engines.local import LocalEngine

    try:
        return LocalEngine(opts.state_dir / "tasks", opts.latencies, opts.isolation)
    except ValueError as exc:
        raise UnknownEngineError(str(exc)) from None


def _slurm(opts: EngineOptions) -> Engine:
    from disagg.engines.slurm import SlurmEngine
    from disagg.engines.slurm_site import SlurmError, SlurmSite

    if not opts.slurm_site:
        raise UnknownEngineError("slurm_site: required with engine 'slurm' (the path of a Slurm site.json)")
    path = Path(opts.slurm_site)
    if not path.is_file():
        raise UnknownEngineError(f"slurm_site: {opts.slurm_site!r} is not a file (expected a Slurm site.json)")
    try:
        site = SlurmSite.load(path)
    except (ValueError, KeyError, OSError) as exc:
        raise UnknownEngineError(f"slurm_site: {opts.slurm_site!r} cannot be read: {exc}") from None
    try:
        return SlurmEngine(site, isolation=opts.isolation)  # tenants' users, as with the local engine
    except ValueError as exc:
        raise UnknownEngineError(str(exc)) from None
    except SlurmError as exc:  # a site that cannot serve (no bridge for slice nodes, …)
        raise UnknownEngineError(f"slurm_site: {opts.slurm_site!r}: {exc}") from None


ENGINES: dict[str, Callable[[EngineOptions], Engine]] = {"local": _local, "slurm": _slurm}


def make_engine(name: str, opts: EngineOptions) -> Engine:
    """The engine called `name`, built from `opts`. Unknown names raise with the known ones listed."""
    factory = ENGINES.get(name)
    if factory is None:
        raise UnknownEngineError(f"engine: unknown engine {name!r}; known: {', '.join(sorted(ENGINES))}")
    return factory(opts)
