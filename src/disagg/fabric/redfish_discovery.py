"""Discovery: a cluster spec drawn from a Redfish CompositionService's ResourceBlocks (`disagg discover redfish`).

  Compute (or ComputerSystem) block  → a machine: cpus from its CPU Processors' TotalCores, memory from
                                       its Memory (CapacityMiB); named after its Chassis (else the block)
  Processor block, ProcessorType GPU → a gpu device with the Processor's Model; FPGA → an fpga device
  Storage block with NVMe drives     → an nvme device per drive (capacity: CapacityBytes / 10^12)
  Memory block                       → a memory device (capacity: CapacityMiB / 1024)
  any other block type               → listed in the warnings, left out
Devices sit in the pool named after their block's Chassis (or its first Zone), or in the machine whose
chassis that is; machines and pools sit in the rack of the Chassis containing theirs (or their first
zone). Every machine and device keeps its block's URI (`redfish_uri`, `redfish_uris`), and device ids
stay `<pool>/<kind><index>` with indices in the blocks' URI order. Blocks already in a composition
appear as held (`allocations` with a `foreign:` job), never offered.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from disagg.fabric.redfish_client import RedfishClient

BLOCKS = "/redfish/v1/CompositionService/ResourceBlocks"
ZONES = "/redfish/v1/CompositionService/ResourceZones"
_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
_COMPOSED = frozenset({"Composing", "Composed"})


def safe_name(text: str, fallback: str) -> str:
    """A disagg name (letters, digits, `_.-`, starting with a letter or digit) from a Redfish name."""
    name = _BAD.sub("-", text.strip()).strip("-._") or fallback
    return name if name[0].isalnum() else "x" + name


def _natural(uri: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", uri)]


@dataclass
class Found:
    """What discovery found, before it becomes a spec."""

    machines: dict[str, dict[str, Any]] = field(default_factory=dict)   # name → machine spec
    #: (location, kind, model, capacity, block URI, CompositionState) of each device
    devices: list[tuple[str, str, str, float, str, str]] = field(default_factory=list)
    #: A held device block's URI → the machine it is attached to (the Compute block of its System)
    owners: dict[str, str] = field(default_factory=dict)
    racks: dict[str, str] = field(default_factory=dict)                 # location → rack
    held_machines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class Discovery:
    """Reads a service's blocks (and their chassis and zones) once; `spec()` is the cluster spec."""

    def __init__(self, client: RedfishClient) -> None:
        self.client = client
        self._cache: dict[str, dict[str, Any]] = {}
        #: Uplink speeds the chassis give (Oem.disagg.UplinkGbps): of machines and pools, of racks
        self.uplinks: dict[str, float] = {}
        self.rack_uplinks: dict[str, float] = {}

    def get(self, uri: str) -> dict[str, Any]:
        key = self.client.path(uri)
        if key not in self._cache:
            self._cache[key] = self.client.get(key)
        return self._cache[key]

    def _place(self, block: dict[str, Any]) -> tuple[str | None, str | None]:
        """(the location's name, its rack) from the block's chassis (else its first zone)."""
        links = block.get("Links", {})
        chassis = [c["@odata.id"] for c in links.get("Chassis", []) if isinstance(c, dict)]
        zones = [z["@odata.id"] for z in links.get("Zones", []) if isinstance(z, dict)]
        if chassis:
            c = self.get(chassis[0])
            name = safe_name(str(c.get("Name") or c.get("Id", "")), "chassis")
            _note_uplink(self.uplinks, name, c)
            parent = c.get("Links", {}).get("ContainedBy")
            rack = None
            if isinstance(parent, dict) and parent.get("@odata.id"):
                p = self.get(parent["@odata.id"])
                rack = safe_name(str(p.get("Name") or p.get("Id", "")), "r0")
                _note_uplink(self.rack_uplinks, rack, p)
            return name, rack or (self._zone_name(zones[0]) if zones else None)
        if zones:
            return self._zone_name(zones[0]), None
        return None, None

    def _zone_name(self, uri: str) -> str:
        z = self.get(uri)
        return safe_name(str(z.get("Name") or z.get("Id", "")), "zone")

    def _parts(self, block: dict[str, Any], key: str) -> list[dict[str, Any]]:
        return [self.get(p["@odata.id"]) for p in block.get(key, []) if isinstance(p, dict) and p.get("@odata.id")]

    def _drives(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        drives = self._parts(block, "Drives")
        for storage in self._parts(block, "Storage"):
            drives += self._parts(storage, "Drives")
        return drives

    def scan(self) -> Found:
        found = Found()
        uris = sorted(self.client.members(BLOCKS), key=_natural)
        blocks = {u: self.get(u) for u in uris}
        compute_chassis = {}
        for uri, b in blocks.items():  # machines first: a device in a machine's chassis is that machine's
            if {"Compute", "ComputerSystem"} & set(_types(b)):
                name, rack = self._place(b)
                machine = self._machine(uri, b, name, rack or "r0", found)
                compute_chassis[name] = machine
        for uri, b in blocks.items():
            types = set(_types(b))
            if types & {"Compute", "ComputerSystem"}:
                continue
            if not types & {"Processor", "Storage", "Memory"}:
                found.warnings.append(f"block {uri}: type {'/'.join(sorted(types)) or 'none'} is not composable "
                                      "by disagg; left out")
                continue
            name, rack = self._place(b)
            location = compute_chassis.get(name or "", name or safe_name(str(b.get("Id", "")), "pool"))
            found.racks.setdefault(location, rack or "r0")
            self._devices(uri, b, types, location, found)
            if _state(b) in _COMPOSED:
                owner = self._owner(b, {m["redfish_uri"]: n for n, m in found.machines.items()})
                if owner is not None:
                    found.owners[uri] = owner
        return found

    def _owner(self, block: dict[str, Any], machines: dict[str, str]) -> str | None:
        """The machine a composed device block is attached to: the Compute block among those of the
        ComputerSystem it is linked to (None when the service does not say)."""
        for system in block.get("Links", {}).get("ComputerSystems", []):
            if not isinstance(system, dict) or not system.get("@odata.id"):
                continue
            links = self.get(system["@odata.id"]).get("Links", {}).get("ResourceBlocks", [])
            for b in links:
                uri = self.client.path(b.get("@odata.id", "")) if isinstance(b, dict) else ""
                if uri in machines:
                    return machines[uri]
        return None

    def _machine(self, uri: str, b: dict[str, Any], chassis: str | None, rack: str, found: Found) -> str:
        cpus = sum(int(p.get("TotalCores") or 0) for p in self._parts(b, "Processors")
                   if p.get("ProcessorType", "CPU") == "CPU")
        memory = sum(float(m.get("CapacityMiB") or 0) for m in self._parts(b, "Memory")) / 1024
        name = chassis if chassis and chassis not in found.machines else safe_name(str(b.get("Name") or
                                                                                      b.get("Id", "")), "m")
        if cpus <= 0 or memory <= 0:
            found.warnings.append(f"block {uri}: a Compute block without cpus or memory ({cpus} cores, "
                                  f"{memory:g} GB); taken as 1 core, 1 GB")
        found.machines[name] = {"name": name, "rack": rack, "cpus": max(cpus, 1), "memory_gb": max(memory, 1.0),
                                "redfish_uri": uri}
        if _state(b) in _COMPOSED:
            found.held_machines.append(name)
        return name

    def _devices(self, uri: str, b: dict[str, Any], types: set[str], location: str, found: Found) -> None:
        state = _state(b)
        if "Processor" in types:
            for p in self._parts(b, "Processors"):
                kind = {"GPU": "gpu", "FPGA": "fpga"}.get(str(p.get("ProcessorType")))
                if kind is None:
                    found.warnings.append(f"block {uri}: processor type {p.get('ProcessorType')} is not a "
                                          "gpu or fpga; left out")
                    continue
                found.devices.append((location, kind, str(p.get("Model") or "generic"), 1.0, uri, state))
        if "Storage" in types:
            for d in self._drives(b):
                if str(d.get("Protocol")) != "NVMe":
                    found.warnings.append(f"block {uri}: drive {d.get('Id')} is {d.get('Protocol')}, not NVMe; "
                                          "left out")
                    continue
                cap = round(float(d.get("CapacityBytes") or 10**12) / 10**12, 6) or 1.0
                found.devices.append((location, "nvme", str(d.get("Model") or "generic"), cap, uri, state))
        if "Memory" in types:
            for m in self._parts(b, "Memory"):
                cap = round(float(m.get("CapacityMiB") or 1024) / 1024, 6) or 1.0
                found.devices.append((location, "memory", str(m.get("Model") or "generic"), cap, uri, state))


def _note_uplink(into: dict[str, float], name: str, chassis: dict[str, Any]) -> None:
    """Keep a chassis' uplink speed when it gives one (disagg's own service does, in its Oem section)."""
    oem = chassis.get("Oem")
    gbps = oem.get("disagg", {}).get("UplinkGbps") if isinstance(oem, dict) else None
    if isinstance(gbps, int | float) and not isinstance(gbps, bool) and gbps > 0:
        into[name] = float(gbps)


def _types(block: dict[str, Any]) -> list[str]:
    """ResourceBlockType: an array in the schema (a scalar from services written for sushy's bug)."""
    t = block.get("ResourceBlockType", [])
    return [str(x) for x in (t if isinstance(t, list) else [t])]


def _state(block: dict[str, Any]) -> str:
    return str(block.get("CompositionStatus", {}).get("CompositionState", ""))


def to_spec(found: Found) -> dict[str, Any]:
    """The cluster spec (a dict ready for YAML) of what discovery found."""
    by_place: dict[str, dict[str, list[tuple[str, float, str]]]] = defaultdict(lambda: defaultdict(list))
    held: list[tuple[str, str]] = []  # (device id, block uri)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for location, kind, model, cap, uri, state in found.devices:
        index = counts[(location, kind)]
        counts[(location, kind)] += 1
        by_place[location][kind].append((model, cap, uri))
        if state in _COMPOSED:
            held.append((f"{location}/{kind}{index}", uri))
    machines = []
    for m in found.machines.values():
        machines.append({**m, "devices": _groups(by_place.pop(m["name"], {}))} if m["name"] in by_place else m)
    pools = [{"name": p, "rack": found.racks.get(p, "r0"), "devices": _groups(kinds)} for p, kinds in by_place.items()]
    spec: dict[str, Any] = {"machines": machines}
    if pools:
        spec["pools"] = pools
    allocations = [{"job": f"foreign:{safe_name(uri.rsplit('/', 1)[-1], 'block')}", "machine": m["name"],
                    "cpus": m["cpus"], "memory_gb": m["memory_gb"]}
                   for m in found.machines.values() if m["name"] in found.held_machines for uri in [m["redfish_uri"]]]
    if held and machines:  # each held device on the machine its system holds (the first one when not said)
        allocations += [{"job": f"foreign:{safe_name(uri.rsplit('/', 1)[-1], 'block')}",
                         "machine": found.owners.get(uri, machines[0]["name"]), "devices": [d]} for d, uri in held]
    if allocations:
        spec["allocations"] = allocations
    return spec


def _groups(kinds: dict[str, list[tuple[str, float, str]]]) -> dict[str, list[dict[str, Any]]]:
    """Devices of one place as the spec's groups: runs of the same model and capacity, one URI per device."""
    out: dict[str, list[dict[str, Any]]] = {}
    for kind, devices in kinds.items():
        groups: list[dict[str, Any]] = []
        for model, cap, uri in devices:
            if groups and (groups[-1]["model"], groups[-1]["capacity"]) == (model, cap):
                groups[-1]["count"] += 1
                groups[-1]["redfish_uris"].append(uri)
            else:
                groups.append({"model": model, "capacity": cap, "count": 1, "redfish_uris": [uri]})
        out[kind] = groups
    return out


def discover(client: RedfishClient) -> tuple[dict[str, Any], list[str]]:
    """(the cluster spec, warnings) of the service `client` speaks to. RedfishFault when it cannot be read."""
    discovery = Discovery(client)
    found = discovery.scan()
    if not found.machines:
        found.warnings.append("no Compute block found: a cluster spec needs at least one machine")
    return with_network(to_spec(found), discovery.uplinks, discovery.rack_uplinks, found.warnings), found.warnings


def with_network(spec: dict[str, Any], uplinks: dict[str, float], racks: dict[str, float],
                 warnings: list[str]) -> dict[str, Any]:
    """The spec with its network: each machine's and pool's `uplink_gbps` and the `network` section's
    `rack_uplink_gbps`, as the service gives them (the spec's defaults, with a warning, where it does not)."""
    from disagg.model.spec import MachineSpec, NetworkSpec, PoolSpec

    defaults = {"machines": MachineSpec.model_fields["uplink_gbps"].default,
                "pools": PoolSpec.model_fields["uplink_gbps"].default}
    missing = []
    for part, default in defaults.items():
        for node in spec.get(part, []):
            node["uplink_gbps"] = uplinks.get(node["name"], default)
            if node["name"] not in uplinks:
                missing.append(node["name"])
    rack = max(racks.values()) if racks else NetworkSpec.model_fields["rack_uplink_gbps"].default
    if len(set(racks.values())) > 1:
        warnings.append(f"racks' uplinks differ ({sorted(set(racks.values()))} Gbit/s); a spec has one: "
                        f"rack_uplink_gbps {rack:g}")
    if missing:
        warnings.append(f"no uplink speed given for {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}: "
                        "the spec's defaults are written (edit uplink_gbps)")
    return {**spec, "network": {"rack_uplink_gbps": rack}}


__all__ = ["Discovery", "discover", "safe_name", "to_spec"]
