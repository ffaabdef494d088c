"""The Redfish resources disagg serves, drawn from its inventory: pure functions from a store `Inventory`
to payloads (dicts), so the routes only fetch, pick and answer.

    machine  → a Compute ResourceBlock (its cpus as one CPU Processor, its memory as one Memory), a
               Chassis (RackMount) in its rack's Chassis, in its rack's ResourceZone
    device   → a ResourceBlock of its kind: gpu/fpga → Processor (ProcessorType GPU/FPGA, Model),
               nvme → Storage (one NVMe Drive), memory → Memory; in its location's Chassis, in its
               rack's zone and its pool's zone
    rack     → a Chassis (Rack) and a ResourceZone;  pool → a Chassis (Enclosure) and a ResourceZone
    slice machine (a job's or a composition's) → a composed ComputerSystem (SystemType Composed)
               with its machine's Compute block and its devices' blocks in Links.ResourceBlocks

Ids keep disagg's names: a block is its device id with `:` for `/` (`iobox0:gpu0`) or its machine's
name; a zone or a rack's chassis is `rack:<rack>` / `pool:<pool>`. `:` cannot stand in a disagg name
(and is safe in a URI), so no two resources share an id. A composed system's id is its slice
machine's name (`<slice>-m<i>`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from disagg.model.states import Health, SliceState
from disagg.store import Inventory, LiveSlice
from disagg.store.compositions import DeviceInfo, NodeRow

V1 = "/redfish/v1"
SYSTEMS = f"{V1}/Systems"
CAPABILITIES = f"{SYSTEMS}/Capabilities"
CHASSIS = f"{V1}/Chassis"
COMPOSITION = f"{V1}/CompositionService"
BLOCKS = f"{COMPOSITION}/ResourceBlocks"
ZONES = f"{COMPOSITION}/ResourceZones"
TASKS = f"{V1}/TaskService/Tasks"
MONITORS = f"{V1}/TaskService/TaskMonitors"

T_BLOCK = "#ResourceBlock.v1_4_3.ResourceBlock"
T_ZONE = "#Zone.v1_6_3.Zone"
T_SYSTEM = "#ComputerSystem.v1_27_0.ComputerSystem"
T_PROCESSOR = "#Processor.v1_22_0.Processor"
T_MEMORY = "#Memory.v1_23_0.Memory"
T_DRIVE = "#Drive.v1_22_0.Drive"
T_CHASSIS = "#Chassis.v1_28_0.Chassis"
T_CAPS = "#CollectionCapabilities.v1_4_1.CollectionCapabilities"

#: ResourceBlockType and the component a device block holds, by disagg's device kind.
KIND_BLOCK = {"gpu": ("Processor", "Processors"), "fpga": ("Processor", "Processors"),
              "nvme": ("Storage", "Drives"), "memory": ("Memory", "Memory")}


def ref(uri: str) -> dict[str, str]:
    return {"@odata.id": uri}


def block_id(name: str) -> str:
    """A machine's or a device's block id: its name, `:` for `/` (a URI segment holds no `/`)."""
    return name.replace("/", ":")


def block_name(block: str) -> str:
    """The machine or device behind a block id (the inverse of `block_id`)."""
    return block.replace(":", "/")


def rack_id(rack: str) -> str:
    return f"rack:{rack}"


def pool_zone_id(pool: str) -> str:
    return f"pool:{pool}"


def collection(uri: str, odata_type: str, name: str, members: list[str], **extra: Any) -> dict[str, Any]:
    """A Redfish resource collection of `members` (their URIs)."""
    return {"@odata.id": uri, "@odata.type": odata_type, "Name": name, "Members": [ref(m) for m in members],
            "Members@odata.count": len(members), **extra}


@dataclass(frozen=True)
class View:
    """The inventory as the Redfish resources need it, indexed once per request."""

    inv: Inventory
    visible: Callable[[LiveSlice], bool]

    @cached_property
    def nodes(self) -> dict[str, NodeRow]:
        return {n.name: n for n in self.inv.nodes}

    @cached_property
    def devices(self) -> dict[str, DeviceInfo]:
        return {d.id: d for d in self.inv.devices}

    def machines_of_slices(self) -> dict[str, tuple[LiveSlice, int]]:
        """Slice machine name → (its slice, its index) for every live slice the caller may see."""
        out = {}
        for s in self.inv.slices:
            if self.visible(s):
                for i, m in enumerate(s.placement.machines):
                    out[m.name] = (s, i)
        return out

    def systems_on(self, node: str) -> list[str]:
        """The visible composed systems that use `node`'s Compute block or a device of `node`."""
        out = []
        for name, (s, i) in self.machines_of_slices().items():
            m = s.placement.machines[i]
            if m.host == node or node in m.devices:
                out.append(f"{SYSTEMS}/{name}")
        return out


# --- blocks --------------------------------------------------------------------------------------
def _status(state: str = "Enabled", health: str = "OK") -> dict[str, str]:
    return {"State": state, "Health": health}


def compute_block(view: View, node: NodeRow) -> dict[str, Any]:
    """A machine's Compute block: shared by the slice machines on it until its cpus or memory run out."""
    uri = f"{BLOCKS}/{block_id(node.name)}"
    used_cpus = used_mem = 0.0
    users = 0
    whole = False
    for s in view.inv.slices:
        for t in s.placement.tasks:
            if t.machine == node.name:
                used_cpus += t.cpus
                used_mem += t.memory_gb
                users += 1
                whole = whole or (s.job_id is None and t.cpus >= node.cpus)
    full = whole or used_cpus >= node.cpus - 1e-9 or used_mem >= node.memory_gb - 1e-9
    state = "Unused" if users == 0 else "Composed" if full else "ComposedAndAvailable"
    return {
        "@odata.id": uri, "@odata.type": T_BLOCK, "Id": block_id(node.name), "Name": node.name,
        "Description": f"machine {node.name}: {node.cpus:g} cpus, {node.memory_gb:g} GB",
        "ResourceBlockType": ["Compute"],
        "Status": _status(),
        "CompositionStatus": {"Reserved": False, "CompositionState": state, "SharingCapable": True,
                              "SharingEnabled": True, "NumberOfCompositions": users},
        "Processors": [ref(f"{uri}/Processors/cpu0")],
        "Memory": [ref(f"{uri}/Memory/dram0")],
        "Links": {"Chassis": [ref(f"{CHASSIS}/{node.name}")], "ComputerSystems": [ref(u) for u in
                                                                                  view.systems_on(node.name)],
                  "Zones": [ref(f"{ZONES}/{rack_id(node.rack)}")]},
    }


def device_block(view: View, d: DeviceInfo) -> dict[str, Any]:
    """A device's block: one component (Processor, Drive or Memory), composed by one system at a time."""
    uri = f"{BLOCKS}/{block_id(d.id)}"
    node = view.nodes.get(d.location)
    rack = node.rack if node is not None else "r0"
    block_type, component = KIND_BLOCK[d.kind]
    composing = any(s.id == d.slice_id and s.state == SliceState.COMPOSING for s in view.inv.slices)
    if d.health != Health.HEALTHY or not view.inv.reach.reachable(d.location):
        state, status = "Unavailable", _status("UnavailableOffline", "Critical")
    elif d.drained:
        state, status = "Unavailable", _status("StandbyOffline")
    else:
        state, status = ("Unused" if d.slice_id is None else "Composing" if composing else "Composed"), _status()
    zones = [ref(f"{ZONES}/{rack_id(rack)}")]
    if node is not None and node.kind == "pool":
        zones.append(ref(f"{ZONES}/{pool_zone_id(node.name)}"))
    return {
        "@odata.id": uri, "@odata.type": T_BLOCK, "Id": block_id(d.id), "Name": d.id,
        "Description": f"{d.kind} {d.model} in {d.location}",
        "ResourceBlockType": [block_type],
        "Status": status,
        "CompositionStatus": {"Reserved": False, "CompositionState": state, "SharingCapable": False,
                              "MaxCompositions": 1, "NumberOfCompositions": 0 if d.slice_id is None else 1},
        component: [ref(f"{uri}/{component}/{d.kind}{d.index}")],
        "Links": {"Chassis": [ref(f"{CHASSIS}/{d.location}")], "ComputerSystems": [ref(u) for u in
                                                                                  view.systems_on(d.id)],
                  "Zones": zones},
    }


def component(view: View, block: str, kind: str, part: str) -> dict[str, Any] | None:
    """A block's Processor, Memory or Drive (`kind`: Processors | Memory | Drives); None if none such."""
    name = block_name(block)
    node = view.nodes.get(name)
    uri = f"{BLOCKS}/{block}/{kind}/{part}"
    if node is not None and node.kind == "machine":
        if (kind, part) == ("Processors", "cpu0"):
            return {"@odata.id": uri, "@odata.type": T_PROCESSOR, "Id": part, "Name": f"{name} CPU",
                    "ProcessorType": "CPU", "TotalCores": int(node.cpus), "Status": _status()}
        if (kind, part) == ("Memory", "dram0"):
            return {"@odata.id": uri, "@odata.type": T_MEMORY, "Id": part, "Name": f"{name} memory",
                    "MemoryType": "DRAM", "CapacityMiB": int(node.memory_gb * 1024), "Status": _status()}
        return None
    d = view.devices.get(name)
    if d is None or KIND_BLOCK[d.kind][1] != kind or part != f"{d.kind}{d.index}":
        return None
    health = _status() if d.health == Health.HEALTHY else _status("UnavailableOffline", "Critical")
    if d.kind in ("gpu", "fpga"):
        return {"@odata.id": uri, "@odata.type": T_PROCESSOR, "Id": part, "Name": d.id,
                "ProcessorType": d.kind.upper(), "Model": d.model, "Status": health}
    if d.kind == "nvme":
        return {"@odata.id": uri, "@odata.type": T_DRIVE, "Id": part, "Name": d.id, "Protocol": "NVMe",
                "MediaType": "SSD", "Model": d.model, "CapacityBytes": int(d.capacity * 10**12), "Status": health}
    return {"@odata.id": uri, "@odata.type": T_MEMORY, "Id": part, "Name": d.id, "MemoryType": "DRAM",
            "Model": d.model, "CapacityMiB": int(d.capacity * 1024), "Status": health}


def blocks(view: View) -> list[str]:
    """Every block's URI: the machines' Compute blocks, then the devices', in inventory order."""
    return [f"{BLOCKS}/{block_id(n.name)}" for n in view.inv.nodes if n.kind == "machine"] + [
        f"{BLOCKS}/{block_id(d.id)}" for d in view.inv.devices]


def block(view: View, ident: str) -> dict[str, Any] | None:
    name = block_name(ident)
    node = view.nodes.get(name)
    if node is not None and node.kind == "machine":
        return compute_block(view, node)
    d = view.devices.get(name)
    return device_block(view, d) if d is not None else None


# --- zones and chassis ---------------------------------------------------------------------------
def zones(view: View) -> list[str]:
    racks = dict.fromkeys(n.rack for n in view.inv.nodes)
    return [f"{ZONES}/{rack_id(r)}" for r in racks] + [
        f"{ZONES}/{pool_zone_id(n.name)}" for n in view.inv.nodes if n.kind == "pool"]


def zone(view: View, ident: str) -> dict[str, Any] | None:
    """A rack's zone (its machines' and devices' blocks) or a pool's (its devices' blocks)."""
    kind, _, name = ident.partition(":")
    nodes = view.nodes
    if kind == "rack" and any(n.rack == name for n in view.inv.nodes):
        members = [n.name for n in view.inv.nodes if n.rack == name and n.kind == "machine"]
        members += [d.id for d in view.inv.devices if nodes[d.location].rack == name]
        what = f"rack {name}"
    elif kind == "pool" and name in nodes and nodes[name].kind == "pool":
        members = [d.id for d in view.inv.devices if d.location == name]
        what = f"pool {name}"
    else:
        return None
    return {"@odata.id": f"{ZONES}/{ident}", "@odata.type": T_ZONE, "Id": ident, "Name": what,
            "Description": f"the resource blocks of {what}", "ZoneType": "ZoneOfResourceBlocks",
            "Status": _status(), "Links": {"ResourceBlocks": [ref(f"{BLOCKS}/{block_id(m)}") for m in members]}}


def chassis_list(view: View) -> list[str]:
    racks = dict.fromkeys(n.rack for n in view.inv.nodes)
    return [f"{CHASSIS}/{rack_id(r)}" for r in racks] + [f"{CHASSIS}/{n.name}" for n in view.inv.nodes]


def chassis(view: View, ident: str) -> dict[str, Any] | None:
    """A rack (ChassisType Rack) holding its machines (RackMount) and pools (Enclosure)."""
    kind, _, rack = ident.partition(":")
    base = {"@odata.id": f"{CHASSIS}/{ident}", "@odata.type": T_CHASSIS, "Id": ident, "Status": _status()}
    if kind == "rack" and rack:
        inside = [n.name for n in view.inv.nodes if n.rack == rack]
        if not inside:
            return None
        return {**base, "Name": rack, "ChassisType": "Rack", **_uplink(view, f"rack:{rack}"),
                "Links": {"Contains": [ref(f"{CHASSIS}/{x}") for x in inside]}}
    node = view.nodes.get(ident)
    if node is None:
        return None
    return {**base, "Name": node.name, "ChassisType": "RackMount" if node.kind == "machine" else "Enclosure",
            **_uplink(view, f"up:{node.name}"), "Links": {"ContainedBy": ref(f"{CHASSIS}/{rack_id(node.rack)}")}}


def _uplink(view: View, link: str) -> dict[str, Any]:
    """The chassis' uplink speed, in its Oem section (Redfish has no standard property for it):
    `disagg discover redfish` writes it back as the spec's `uplink_gbps` / `rack_uplink_gbps`."""
    gbps = view.inv.link_gbps.get(link)
    return {} if gbps is None else {"Oem": {"disagg": {"UplinkGbps": gbps}}}
