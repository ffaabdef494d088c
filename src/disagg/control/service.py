"""Assembling a controller from settings: store (migrated), inventory, fabric, engine, reconciliation.

`disagg serve`, the tests and the benchmarks all start a controller through `open_service`, so they
run the same code path as a user does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from disagg.control.loop import Controller, ControllerConfig
from disagg.control.reconcile import ReconcileReport, reconcile
from disagg.engines.base import Engine
from disagg.engines.registry import EngineOptions, make_engine
from disagg.fabric.emulated import EmulatedFabric, OperationLatencies
from disagg.model import SpecError, load_cluster
from disagg.store import DEFAULT_URL, Store, normalize_url

#: The FlowOS-RM testbed (seed 000), packaged so `disagg serve` works from any directory.
DEFAULT_CLUSTER = Path(__file__).with_name("default_cluster.yaml")


@dataclass
class Settings:
    """Everything `disagg serve` can be told (options, `DISAGG_*` variables, or a YAML config file)."""

    host: str = "127.0.0.1"
    port: int = 8080
    db: str = DEFAULT_URL
    cluster: str | None = None
    state_dir: str | None = None
    policy: str = "drmaestro-na"
    latency_scale: float = 1.0
    tick_s: float = 0.25
    round_gap_s: float = 0.5
    window: int = 32
    engine: str = "local"              # local | slurm (disagg.engines.registry)
    slurm_site: str | None = None      # engine slurm: the path of the Slurm site.json
    api_process: bool = True           # serve: the REST API in a process apart from the loop (control.split)
    loop_nice: int = 5                 # serve: the loop process's niceness increment (0: as the API)
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved_state_dir(self) -> Path:
        """Where the fabric's state and the jobs' files live: beside an SQLite file, else ./disagg.d."""
        if self.state_dir:
            return Path(self.state_dir)
        url = normalize_url(self.db)
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            return Path(url[len("sqlite:///") :] + ".d")
        return Path("disagg.d")


def settings_from(config_file: str | None, **given: Any) -> Settings:
    """Merge, lowest first: defaults, the config file, then options (Typer fills env vars into them)."""
    values: dict[str, Any] = {}
    if config_file:
        try:
            data = yaml.safe_load(Path(config_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SpecError(config_file, [f"cannot read the config file: {exc}"]) from None
        names = {f.name for f in fields(Settings)} - {"extra"}
        if not isinstance(data, dict):
            allowed = ", ".join(sorted(names))
            raise SpecError(config_file, [f"(top level): expected a mapping with keys {allowed}"])
        unknown = sorted(set(data) - names)
        if unknown:
            raise SpecError(
                config_file, [f"{k}: unknown setting; allowed: {', '.join(sorted(names))}" for k in unknown]
            )
        values.update({k.replace("-", "_"): v for k, v in data.items()})
    values.update({k: v for k, v in given.items() if v is not None})
    return Settings(**values)


@dataclass
class Service:
    settings: Settings
    store: Store
    fabric: EmulatedFabric
    engine: Engine
    controller: Controller
    reconciled: ReconcileReport

    def close(self) -> None:
        self.controller.stop()
        self.engine.close()
        self.fabric.close()
        self.store.close()


def open_service(settings: Settings, api_only: bool = False) -> Service:
    """Open (and migrate) the store, load the cluster, start nothing yet but reconcile the world.

    `api_only`: for the API process of a split `disagg serve`, whose loop process has migrated,
    synced and reconciled already: only open the store, the fabric and the engine.
    """
    cluster = load_cluster(settings.cluster or DEFAULT_CLUSTER)
    state = settings.resolved_state_dir()
    state.mkdir(parents=True, exist_ok=True)
    store = Store(settings.db)
    if not api_only:
        store.migrate()
        store.sync_inventory(cluster)
    latencies = OperationLatencies().scaled(settings.latency_scale)
    fabric = EmulatedFabric(state / "fabric.db", cluster, latencies)
    engine = make_engine(settings.engine, EngineOptions(state, latencies, settings.slurm_site))
    report = ReconcileReport() if api_only else reconcile(store, fabric, engine)
    controller = Controller(
        store,
        fabric,
        engine,
        ControllerConfig(
            policy=settings.policy, tick_s=settings.tick_s, window=settings.window, round_gap_s=settings.round_gap_s
        ),
    )
    return Service(settings, store, fabric, engine, controller, report)

