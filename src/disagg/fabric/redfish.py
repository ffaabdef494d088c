"""The Redfish fabric driver: slices composed on composable hardware through a DMTF CompositionService.

Config: `fabric: {driver: redfish, url: https://ome.example, username: u, password_file: /etc/rf.pw}`
with a cluster spec from `disagg discover redfish` (every machine and device keeps its block's URI).

A slice machine becomes a composed ComputerSystem (specific composition: `POST /redfish/v1/Systems`
with its machine's Compute block and its devices' blocks in `Links.ResourceBlocks`, sized by
`ProcessorSummary.CoreCount` and `MemorySummary.TotalSystemMemoryGiB`), named `<marker>:<slice
machine>` — the marker says which disagg made it — and is decomposed (`DELETE`) at destroy-machine.
How the six slice operations map (docs/design-decisions.md):

  attach-device   the block is checked (exists, healthy, in no other composition); on a service whose
                  composed systems are updatable (`ResourceBlocks@Redfish.UpdatableAfterCreate` on the
                  capabilities object) the slice machine's system is composed with its Compute block
                  first and the device added (`#ComputerSystem.AddResourceBlock`); otherwise the blocks
                  are only collected
  launch-machine  `compose`: the system is composed with all its blocks at once (or, updatable, made
                  whole), before the engine launches the machine
  detach-device   updatable: `#ComputerSystem.RemoveResourceBlock`; otherwise nothing (the block goes
                  back with the system)
  destroy-machine `decompose`: `DELETE` the system, after the engine destroyed the machine

The composed systems are the fabric's truth: after a restart `adopt` keeps those of live slice
machines and decomposes the rest carrying this driver's marker; a composition without it is never
touched. Block health (`Status`) feeds device health; blocks others compose are kept from the
policies (`holdings`), and a `ResourceInUse` refusal marks the block held at once.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from disagg.fabric.base import AttachmentInfo, FabricDriver, FabricError, FabricHoldings, Mechanism
from disagg.fabric.redfish_client import RedfishClient, RedfishFault
from disagg.model import Cluster, SliceMachine

log = logging.getLogger(__name__)

SYSTEMS = "/redfish/v1/Systems"
CAPABILITIES = "/redfish/v1/Systems/Capabilities"
BLOCKS = "/redfish/v1/CompositionService/ResourceBlocks"
#: CompositionState values of a block that is part of some composition.
IN_USE = frozenset({"Composing", "Composed", "ComposedAndAvailable"})
_HELD_STATES = frozenset({"Composing", "Composed"})  # a Compute block shared ("ComposedAndAvailable") has room
_BROKEN_STATES = frozenset({"UnavailableOffline", "Absent"})


@dataclass(frozen=True)
class Composed:
    """One of this driver's composed systems: its URI, its slice machine, its blocks' URIs."""

    uri: str
    machine: str
    blocks: tuple[str, ...]


class RedfishFabric(FabricDriver):
    """Composes slice machines on a Redfish CompositionService (module docstring)."""

    name = "redfish"

    def __init__(self, cluster: Cluster, client: RedfishClient, marker: str, poll_s: float = 2.0) -> None:
        self.client = client
        self.marker = marker
        self.poll_s = poll_s
        self.device_uri = {d.id: _norm(d.redfish_uri) for d in cluster.devices if d.redfish_uri}
        self.machine_uri = {m.name: _norm(m.redfish_uri) for m in cluster.machines if m.redfish_uri}
        self.by_uri = {u: d for d, u in self.device_uri.items()} | {u: m for m, u in self.machine_uri.items()}
        self._updatable: bool | None = None
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._polled: tuple[float, dict[str, dict[str, Any]]] = (-math.inf, {})
        self._held: set[str] = set()  # block URIs a ResourceInUse showed held, until the next poll

    # --- what the service says ---------------------------------------------------------------
    @property
    def updatable(self) -> bool:
        """Whether the service adds and removes blocks of a composed system (its capabilities object)."""
        if self._updatable is None:
            try:
                caps = self.client.get(CAPABILITIES)
            except RedfishFault as exc:
                if exc.status != 404:
                    raise
                caps = {}
            links = caps.get("Links", {}) if isinstance(caps.get("Links"), dict) else {}
            self._updatable = bool(links.get("ResourceBlocks@Redfish.UpdatableAfterCreate", False))
        return self._updatable

    def composed(self) -> dict[str, Composed]:
        """This driver's composed systems by slice machine (those whose Name carries the marker)."""
        out = {}
        prefix = self.marker + ":"
        for uri in self.client.members(SYSTEMS):
            try:
                s = self.client.get(uri)
            except RedfishFault as exc:
                if exc.status == 404:  # decomposed meanwhile
                    continue
                raise
            name = str(s.get("Name", ""))
            if name.startswith(prefix):
                blocks = tuple(_norm(str(b.get("@odata.id", ""))) for b in s.get("Links", {}).get("ResourceBlocks", []))
                out[name[len(prefix):]] = Composed(self.client.path(uri), name[len(prefix):], blocks)
        return out

    def _blocks(self, fresh: bool = False) -> dict[str, dict[str, Any]]:
        """Every known block's resource by URI, read at most every `poll_s` (health, holdings)."""
        at, blocks = self._polled
        if not fresh and time.monotonic() - at < self.poll_s:
            return blocks
        blocks = {}
        for uri in self.by_uri:
            try:
                blocks[uri] = self.client.get(uri)
            except RedfishFault as exc:
                if exc.status != 404:
                    raise
                blocks[uri] = {"Status": {"State": "Absent", "Health": "Critical"}}
        self._polled = (time.monotonic(), blocks)
        self._held.clear()
        return blocks

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def _uri(self, name: str, table: Mapping[str, str], what: str) -> str:
        uri = table.get(name)
        if uri is None:
            raise FabricError(f"{what} {name!r} has no Redfish block in the cluster spec (redfish_uri; "
                              "make the spec with `disagg discover redfish`)", retryable=False)
        return uri

    def _refused(self, exc: RedfishFault) -> RedfishFault:
        """Note the blocks a ResourceInUse names as held by another user (the next round plans around them)."""
        if exc.resource_in_use:
            self._held.update(_norm(self.client.path(u)) for u in exc.in_use)
            exc.retryable = False
        return exc

    # --- composing -----------------------------------------------------------------------------
    def _create(self, machine: SliceMachine, blocks: list[str]) -> None:
        body = {"Name": f"{self.marker}:{machine.name}",
                "Description": f"composed by disagg ({self.marker}) for slice machine {machine.name}",
                "Links": {"ResourceBlocks": [{"@odata.id": u} for u in blocks]},
                "ProcessorSummary": {"CoreCount": max(1, math.ceil(machine.cpus))},
                "MemorySummary": {"TotalSystemMemoryGiB": machine.memory_gb}}
        try:
            self.client.change("POST", SYSTEMS, json=body, ok=(200, 201, 204))
        except RedfishFault as exc:
            raise self._refused(exc) from exc

    def _action(self, system: Composed, action: str, block: str) -> None:
        try:
            self.client.change("POST", f"{system.uri}/Actions/ComputerSystem.{action}",
                               json={"ResourceBlock": {"@odata.id": block}}, etag_of=system.uri)
        except RedfishFault as exc:
            raise self._refused(exc) from exc

    def compose(self, machine: SliceMachine) -> None:
        """launch-machine: the slice machine's system with every block (module docstring). Idempotent."""
        wanted = [self._uri(machine.host, self.machine_uri, "machine")]
        wanted += [self._uri(d, self.device_uri, "device") for d in machine.devices]
        with self._lock(machine.name):
            mine = self.composed().get(machine.name)
            if mine is None:
                self._create(machine, wanted)
                return
            missing = [u for u in wanted if u not in mine.blocks]
            if missing and not self.updatable:
                raise FabricError(f"system {mine.uri} lacks {len(missing)} blocks and the service cannot add "
                                  "blocks to a composed system", retryable=False)
            for u in missing:
                self._action(mine, "AddResourceBlock", u)

    def decompose(self, machine: SliceMachine) -> None:
        """destroy-machine: DELETE the slice machine's system (gone already is done)."""
        with self._lock(machine.name):
            mine = self.composed().get(machine.name)
            if mine is not None:
                self.client.delete(mine.uri)

    def adopt(self, machines: Mapping[str, str]) -> list[str]:
        """Keep the systems of live slice machines; decompose this driver's others. Returns those decomposed."""
        gone = []
        for name, system in sorted(self.composed().items()):
            if name not in machines:
                self.client.delete(system.uri)
                gone.append(name)
                log.info("decomposed %s (%s): no live slice holds it", system.uri, name)
        return gone

    # --- the driver interface -----------------------------------------------------------------
    def attach(self, device: str, machine: str, mechanism: Mechanism, gbps: float = 0.0,
               slice_machine: SliceMachine | None = None) -> AttachmentInfo:
        """Check the block; updatable services: compose the slice machine's system and add it now."""
        uri = self._uri(device, self.device_uri, "device")
        mine = self.composed().get(slice_machine.name) if slice_machine is not None else None
        if mine is None or uri not in mine.blocks:
            self._check_free(device, uri)
        if slice_machine is not None and self.updatable:
            with self._lock(slice_machine.name):
                mine = self.composed().get(slice_machine.name)
                if mine is None:
                    self._create(slice_machine, [self._uri(machine, self.machine_uri, "machine")])
                    mine = self.composed().get(slice_machine.name)
                if mine is not None and uri not in mine.blocks:
                    self._action(mine, "AddResourceBlock", uri)
        return AttachmentInfo(device, machine, mechanism)

    def _check_free(self, device: str, uri: str) -> None:
        block = self.client.get(uri)
        state = str(block.get("CompositionStatus", {}).get("CompositionState", ""))
        if not _healthy(block):
            raise FabricError(f"device {device}: its block {uri} is not healthy ({block.get('Status')})",
                              retryable=False)
        if state in IN_USE:
            self._held.add(uri)
            raise FabricError(f"device {device}: its block {uri} is in another composition ({state})",
                              retryable=False)

    def detach(self, device: str, machine: str, slice_machine: SliceMachine | None = None) -> None:
        """Updatable services: remove the block from the system that holds it; otherwise nothing."""
        uri = self.device_uri.get(device)
        if uri is None or not self.updatable:
            return
        for system in self.composed().values():
            if uri in system.blocks and (slice_machine is None or system.machine == slice_machine.name):
                with self._lock(system.machine):
                    self._action(system, "RemoveResourceBlock", uri)

    def attachments(self) -> list[AttachmentInfo]:
        """The devices in this driver's composed systems, on the machine of each system's Compute block."""
        out = []
        for system in self.composed().values():
            hosts = [self.by_uri[b] for b in system.blocks if b in self.by_uri and b in self.machine_uri.values()]
            for b in system.blocks:
                device = self.by_uri.get(b)
                if device is not None and device in self.device_uri and hosts:
                    out.append(AttachmentInfo(device, hosts[0], "pcie-over-ethernet"))
        return sorted(out, key=lambda a: a.device)

    def healthy(self, device: str) -> bool:
        uri = self.device_uri.get(device)
        return uri is None or _healthy(self.client.get(uri))

    def failed_devices(self) -> set[str]:
        return {self.by_uri[u] for u, b in self._blocks().items() if u in self.by_uri and not _healthy(b)
                and self.by_uri[u] in self.device_uri}

    def down_links(self) -> set[str]:
        return set()  # a CompositionService reports no links

    def link_load(self) -> dict[str, float]:
        return {}

    def holdings(self) -> FabricHoldings:
        """Blocks in compositions this driver did not make: devices held, machines taken whole."""
        blocks = self._blocks()
        mine = {b for s in self.composed().values() for b in s.blocks}
        held = set(self._held)
        for uri, b in blocks.items():
            state = str(b.get("CompositionStatus", {}).get("CompositionState", ""))
            if uri not in mine and (state in _HELD_STATES or (state in IN_USE and uri in self.device_uri.values())):
                held.add(uri)
        devices = frozenset(self.by_uri[u] for u in held if u in self.by_uri and self.by_uri[u] in self.device_uri)
        machines = frozenset(self.by_uri[u] for u in held if u in self.by_uri and self.by_uri[u] in self.machine_uri)
        return FabricHoldings(devices, machines, holder=f"redfish:{self.client.base}")

    def close(self) -> None:
        self.client.close()


def _norm(uri: str | None) -> str:
    """A block URI as the path only (an absolute URL from discovery and a relative one compare equal)."""
    from urllib.parse import urlparse

    path = urlparse(uri or "").path
    return path.rstrip("/") if path != "/" else path


def _healthy(block: dict[str, Any]) -> bool:
    status = block.get("Status", {}) if isinstance(block.get("Status"), dict) else {}
    return status.get("Health") != "Critical" and status.get("State") not in _BROKEN_STATES


def default_marker() -> str:
    """Which disagg made a composition, when the config names none: disagg on this host."""
    return f"disagg@{socket.gethostname()}"


def make_redfish(cluster: Cluster, options: Mapping[str, Any]) -> RedfishFabric:
    """The driver from the `fabric:` options (already checked by the registry)."""
    password = options.get("password")
    if options.get("password_file"):
        password = Path(str(options["password_file"])).read_text().strip()
    verify: bool | str = not bool(options.get("insecure", False))
    if options.get("ca_file"):
        verify = str(options["ca_file"])
    client = RedfishClient(str(options["url"]), options.get("username"), password, verify=verify,
                           timeout_s=float(options.get("timeout_s", 10.0)), retries=int(options.get("retries", 4)),
                           backoff_s=float(options.get("backoff_s", 0.2)),
                           task_timeout_s=float(options.get("task_timeout_s", 300.0)))
    return RedfishFabric(cluster, client, str(options.get("marker") or default_marker()),
                         float(options.get("poll_s", 2.0)))


__all__ = ["RedfishFabric", "default_marker", "make_redfish"]
