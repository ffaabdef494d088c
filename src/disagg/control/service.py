"""Assembling a controller from its config: store (migrated), inventory, fabric, engine, reconciliation.

`disagg serve`, the tests and the benchmarks all start a controller through `open_service`, so they
run the same code path as a user does.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from disagg.control.config import Config
from disagg.control.gc import collect
from disagg.control.jobs import JobService, hold_never_fitting
from disagg.control.leadership import Leadership, LeaseCollector, replica_name
from disagg.control.loop import Controller
from disagg.control.metrics import ControllerMetrics
from disagg.control.reconcile import ReconcileReport, reconcile
from disagg.control.recovery import StateLossError, StoreMark, hold, state_loss, unknown_handles
from disagg.control.split import LoopLink
from disagg.control.tenants import TenantCollector, TenantDirectory
from disagg.display import few
from disagg.engines.base import Engine
from disagg.engines.registry import EngineOptions, make_engine
from disagg.fabric.base import FabricDriver, FabricError
from disagg.fabric.emulated import OperationLatencies
from disagg.fabric.registry import DriverOptions, make_driver
from disagg.model import Cluster, SpecError, load_cluster
from disagg.placement.base import collector_paused
from disagg.store import Store

log = logging.getLogger(__name__)

#: The FlowOS-RM testbed (seed 000), packaged so `disagg serve` works from any directory.
DEFAULT_CLUSTER = Path(__file__).with_name("default_cluster.yaml")


@dataclass
class Service:
    """One controller: its store, fabric and engine, the scheduling loop, and the JobService the API calls."""

    config: Config
    store: Store
    fabric: FabricDriver
    engine: Engine
    controller: Controller
    jobs: JobService
    reconciled: ReconcileReport
    leadership: Leadership | None = None  # None: the API process of a split serve (its loop process leads)
    in_use: int | None = None  # the state directory's in-use lock (`control.recovery.hold`), while this leads

    @property
    def settings(self) -> Config:
        return self.config

    def attach_loop(self, link: LoopLink) -> None:
        """This process serves the API only; its loop runs in another process (`control.split`)."""
        self.jobs.wake = link.wake
        self.jobs.round_info = lambda: _last_round(link)
        self.jobs.metrics.loop_text = lambda: str(link.status().get("metrics", "")).encode()

    def close(self) -> None:
        self.controller.stop()
        if self.leadership is not None:
            self.leadership.release()  # a standby takes over at its next look, not after the lease
        self.jobs.close()
        self.engine.close()
        self.fabric.close()
        self.store.close()
        if self.in_use is not None:
            os.close(self.in_use)
            self.in_use = None


def _last_round(link: LoopLink) -> dict[str, Any]:
    status = link.status()
    info = status.get("last_round")
    info = info if isinstance(info, dict) else {}
    silence = link.silence(status, time.time())
    return {**info, "trouble": {"cause": silence, "at": status.get("at")}} if silence else info


def open_service(config: Config, api_only: bool = False, waiting: Callable[[str], None] | None = None) -> Service:
    """Open (and migrate) the store, load the cluster, become the leader, start nothing yet but reconcile.

    `api_only`: for the API process of a split `disagg serve`, whose loop process has migrated,
    synced and reconciled already: only open the store, the fabric and the engine.
    Otherwise this blocks until this replica holds the store's lease (`control.leadership`; at once on
    SQLite, or when no other replica leads); `waiting(note)` is told once if it has to wait.

    With the cyclic collector paused but while waiting for the lease: opening reads the inventory into
    hundreds of thousands of objects that live as long as the process, and the collector walked them
    again and again for nothing (1,800 collections, 11 of them full, at 12,500 machines: the loop
    process's opening took 3.9–4.3 s, now 2.9 s, the API process's 1.7 s, now 1.0 s; a standby's
    takeover runs the second half).
    """
    with collector_paused():
        cluster = load_cluster(config.cluster or DEFAULT_CLUSTER)
        _state_dir(config)
        store = Store(config.db)
        if not api_only:
            store.migrate()
    leadership = None if api_only else _lead(config, store, waiting)
    with collector_paused():
        return _opened(config, cluster, store, leadership)


def _state_dir(config: Config) -> None:
    """The state directory, made if missing and the controller's alone (0700: the fabric's state, the jobs'
    records and logs); SpecError naming it where it cannot be made (a FileNotFoundError traceback before)."""
    state = config.resolved_state_dir()
    try:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        state.chmod(0o700)
    except OSError as exc:
        raise SpecError("settings", [f"state_dir: cannot make {str(state)!r} the state directory: "
                                     f"{exc.strerror or exc}"]) from None


def _follow_spec(store: Store, cluster: Cluster, accept_removals: bool) -> None:
    """Make the inventory the spec's (refused with SpecError: the lease goes, in `_opened`), then hold the
    queued jobs it can no longer ever hold and release those held so that it can hold again."""
    said = store.sync_inventory(cluster, accept_removals).summary()
    if not said:
        return
    log.info("inventory as the cluster spec says: %s", said)
    held, released = hold_never_fitting(store)
    if held:
        log.warning("held %d queued jobs that can never fit the cluster as its spec now is: %s", len(held),
                    few(sorted(held), 10))
    if released:
        log.info("released %d jobs held until the cluster could hold them", len(released))


def _opened(config: Config, cluster: Cluster, store: Store, leadership: Leadership | None) -> Service:
    """`open_service` once the store is open (and, but for an API process, led): sync the inventory,
    open the fabric and the engine, reconcile, and assemble the service."""
    api_only = leadership is None
    state = config.resolved_state_dir()
    try:
        if not api_only:
            _follow_spec(store, cluster, config.accept_inventory_removals)
        store.restrict_files()
        latencies = OperationLatencies().scaled(config.latency_scale)
        fabric = make_driver(config.fabric_driver, DriverOptions(cluster, state, latencies, config.fabric_options))
        engine = make_engine(config.engine, EngineOptions(state, latencies, config.slurm_site, config.isolation()))
        epoch = leadership.epoch if leadership is not None else None
        report = ReconcileReport() if api_only else _recover(config, store, fabric, engine, state, epoch)
        # while this leads: a controller of another store started on the state directory now is refused
        in_use = None if api_only else hold(state)
    except BaseException:
        if leadership is not None:
            leadership.release()
        raise
    metrics = ControllerMetrics(store, fabric)
    metrics.registry.register(TenantCollector(TenantDirectory(store, config)))  # gauges per tenant
    metrics.registry.register(LeaseCollector(store, this_replica(config)))
    controller = Controller(store, fabric, engine, config, metrics)
    if leadership is not None:
        controller.lead(leadership)
        controller.mark = StoreMark(store, state, engine.name)
        controller.mark()
        controller.collect = lambda: log.info(collect(store, engine, config.retention_s).summary())
    jobs = JobService(store, engine, controller.health, metrics, config, controller.wake, controller.round_info)
    return Service(config, store, fabric, engine, controller, jobs, report, leadership, in_use)


def this_replica(config: Config) -> str:
    """This replica's name (`--replica-name`, else host:port)."""
    return replica_name(config.replica_name, config.host, config.port)


def _lead(config: Config, store: Store, waiting: Callable[[str], None] | None) -> Leadership:
    """Wait for the store's lease and keep renewing it (`control.leadership`)."""
    name = this_replica(config)
    leadership = Leadership(store, name, f"http://{config.host}:{config.port}", config.lease_s,
                            single=store.dialect == "sqlite")
    try:
        leadership.acquire(waiting)
    except BaseException:
        store.close()
        raise
    leadership.keep()
    return leadership


def _fence(config: Config, fabric: FabricDriver, epoch: int | None) -> list[str]:
    """Give the fabric this leader's epoch before anything is read from it: from now on a paused old
    leader's attach or detach is refused there. A fabric told a newer epoch is a state loss."""
    if epoch is None:
        return []
    try:
        fabric.fence(epoch)
    except FabricError as exc:
        if not config.accept_state_loss:
            return [f"{exc}: the store's lease is older than the fabric has seen (an old backup, or another "
                    "store's controller drives this fabric)"]
        fabric.fence(epoch, force=True)
    return []


def _recover(config: Config, store: Store, fabric: FabricDriver, engine: Engine, state: Path,
             epoch: int | None = None) -> ReconcileReport:
    """Refuse a store that knows less than the state directory (unless the loss is accepted), then
    reconcile (`control.recovery`, `control.reconcile`)."""
    problems = _fence(config, fabric, epoch) + state_loss(store, fabric, engine, state)
    if problems and not config.accept_state_loss:
        engine.close()
        fabric.close()
        store.close()
        raise StateLossError(problems)
    for problem in problems:
        log.warning("state loss accepted: %s", problem)
    report = reconcile(store, fabric, engine)
    if problems:  # the loss is accepted: what the store does not know goes, and the mark starts anew
        for handle in unknown_handles(store, engine):
            engine.forget(handle)
        StoreMark(store, state, engine.name)(force=True)
    return report


__all__ = ["DEFAULT_CLUSTER", "Service", "open_service", "this_replica"]
