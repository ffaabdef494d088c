"""Composed systems: every live slice machine (a job's, or a composition a Redfish client made) as a
ComputerSystem with `SystemType: Composed`, the Systems collection with its composition capabilities,
the capabilities object, and the Task that follows a composition until it is composed.

A composition request (`POST /redfish/v1/Systems`, specific composition) names one Compute block and
any device blocks in `Links.ResourceBlocks`, and may size its share of the machine with
`ProcessorSummary.CoreCount` and `MemorySummary.TotalSystemMemoryGiB` (without them it takes the
whole machine, which must be free). `parse_compose` turns it into what `Store.compose` takes.

A composition (not a job's slice) is updatable unless the service is configured otherwise
(`redfish_updatable: false`): the capabilities object says so (`Links.ResourceBlocks@Redfish.
UpdatableAfterCreate`), the system carries the `#ComputerSystem.AddResourceBlock` and
`#ComputerSystem.RemoveResourceBlock` actions (parameters `ResourceBlock`, and the optional
`ResourceBlockETag` and `ComputerSystemETag`), and a PATCH of `Links.ResourceBlocks` is taken as the
adds and removes it implies. `parse_action` and `parse_patch` turn them into what
`Store.update_composition` takes; the update's task is the system's slice id with `:update`.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from disagg.api.redfish.protocol import RedfishError
from disagg.api.redfish.resources import (
    BLOCKS,
    CAPABILITIES,
    MONITORS,
    SYSTEMS,
    T_CAPS,
    T_SYSTEM,
    TASKS,
    View,
    block_id,
    block_name,
    collection,
    ref,
    zones,
)
from disagg.model.states import SliceState
from disagg.store import LiveSlice
from disagg.store.compositions import UPDATE_FAILED

T_TASK = "#Task.v1_7_4.Task"
#: The properties a composition request may carry (anything else is refused, naming it).
CREATE_PROPERTIES = frozenset({"Name", "Description", "Links", "ProcessorSummary", "MemorySummary"})
_STATE = {SliceState.COMPOSING: "Starting", SliceState.RUNNING: "Enabled", SliceState.COMPOSED: "Enabled",
          SliceState.TEARING_DOWN: "Disabled", SliceState.DONE: "Disabled"}


#: The actions of an updatable composed system, as its payload names them.
ACTIONS = ("AddResourceBlock", "RemoveResourceBlock")
#: The parameters those actions take (ComputerSystem_v1.xml, v1_6_0).
ACTION_PARAMETERS = frozenset({"ResourceBlock", "ResourceBlockETag", "ComputerSystemETag"})
#: The suffix of an update's task id.
UPDATE = ":update"


def system(view: View, name: str, updatable: bool = False) -> dict[str, Any] | None:
    """The slice machine `name` as a composed system (None when no visible live slice has it); with
    `updatable`, a composition carries the actions that add and remove its blocks."""
    found = view.machines_of_slices().get(name)
    if found is None:
        return None
    s, i = found
    m = s.placement.machines[i]
    what = f"slice {s.id} of job {s.job_id}" if s.job_id else f"composition {s.id} of {s.tenant}"
    actions = {f"#ComputerSystem.{a}": {"target": f"{SYSTEMS}/{m.name}/Actions/ComputerSystem.{a}"}
               for a in ACTIONS} if updatable and s.job_id is None else None
    return {
        "@odata.id": f"{SYSTEMS}/{m.name}", "@odata.type": T_SYSTEM, "Id": m.name,
        "Name": s.name if s.job_id is None and s.name else m.name,
        "Description": f"{what}, on machine {m.host}",
        "SystemType": "Composed",
        "PowerState": "On" if s.state in (SliceState.RUNNING, SliceState.COMPOSED) else "Off",
        "Status": {"State": _STATE[s.state], "Health": "OK"},
        "ProcessorSummary": {"CoreCount": math.ceil(m.cpus), "Count": 1},
        "MemorySummary": {"TotalSystemMemoryGiB": m.memory_gb},
        "Links": {"ResourceBlocks": [ref(f"{BLOCKS}/{block_id(x)}") for x in (m.host, *m.devices)]},
        **({"Actions": actions} if actions else {}),
    }


def systems(view: View) -> dict[str, Any]:
    """The Systems collection: the visible slice machines, and how to compose a new one."""
    caps = {"@odata.type": T_CAPS, "Capabilities": [{
        "CapabilitiesObject": ref(CAPABILITIES), "UseCase": "ComputerSystemComposition",
        "Links": {"TargetCollection": ref(SYSTEMS), "RelatedItem": [ref(z) for z in zones(view)]}}]}
    members = [f"{SYSTEMS}/{name}" for name in view.machines_of_slices()]
    return collection(SYSTEMS, "#ComputerSystemCollection.ComputerSystemCollection", "Computer systems",
                      members, **{"@Redfish.CollectionCapabilities": caps})


def capabilities(updatable: bool = False) -> dict[str, Any]:
    """The capabilities object: what a composition request must, may and may later carry (its blocks, when
    the service lets compositions be updated)."""
    return {
        "@odata.id": CAPABILITIES, "@odata.type": T_SYSTEM, "Id": "Capabilities",
        "Name": "Capabilities for composing a system", "Name@Redfish.RequiredOnCreate": True,
        "Description": "A composed system is one machine's Compute block and any device blocks.",
        "Description@Redfish.OptionalOnCreate": True,
        "ProcessorSummary": {"CoreCount@Redfish.OptionalOnCreate": True},
        "MemorySummary": {"TotalSystemMemoryGiB@Redfish.OptionalOnCreate": True},
        "Links": {"ResourceBlocks@Redfish.RequiredOnCreate": True,
                  "ResourceBlocks@Redfish.UpdatableAfterCreate": updatable},
        "@Redfish.ResourceBlockLimits": {"@odata.type": "#ResourceBlock.v1_4_3.ResourceBlockLimits",
                                         "MinCompute": 1, "MaxCompute": 1},
    }


@dataclass(frozen=True)
class ComposeRequest:
    name: str
    host: str
    devices: list[str]
    cpus: float | None
    memory_gb: float | None


#: The least a composition takes: whole cores (Redfish's CoreCount is an integer), and this much memory, GiB
#: (the REST API's least for a job; a composition of CoreCount 0.001 held 4 GPUs while counting for nothing).
MIN_CORES, MIN_MEMORY_GIB = 1, 0.001


def _number(body: dict[str, Any], group: str, key: str, least: float, whole: bool = False) -> float | None:
    part = body.get(group)
    if part is None:
        return None
    if not isinstance(part, dict) or set(part) - {key}:
        raise RedfishError(400, "PropertyUnknown", f"{group} may carry only {key}", [group])
    value = part.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RedfishError(400, "PropertyValueTypeError", f"{group}.{key} must be a number, not {value!r}",
                           [repr(value), f"{group}.{key}"])
    if value < least or (whole and value != int(value)):
        kind = "a whole number" if whole else "a number"
        raise RedfishError(400, "PropertyValueOutOfRange", f"{group}.{key} must be {kind} of at least {least:g}, "
                           f"not {value!r}", [repr(value), f"{group}.{key}"])
    return float(value)


#: Unicode categories a name may not hold: controls (C0, DEL, C1), format characters (bidi overrides, zero
#: widths), unassigned, surrogates and private use, and line and paragraph separators.
_UNPRINTABLE = {"Cc", "Cf", "Cn", "Cs", "Co", "Zl", "Zp"}


def parse_compose(body: Any, view: View) -> ComposeRequest:
    """A composition request as `Store.compose` takes it; 400 naming the property at fault."""
    if not isinstance(body, dict):
        raise RedfishError(400, "MalformedJSON", "the body must be a JSON object")
    unknown = sorted(set(body) - CREATE_PROPERTIES)
    if unknown:
        raise RedfishError(400, "PropertyUnknown", f"property {unknown[0]} is not known here "
                           f"(allowed: {', '.join(sorted(CREATE_PROPERTIES))})", unknown[:1])
    name = body.get("Name")
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise RedfishError(400, "PropertyMissing", "Name is required: a string of 1 to 255 characters", ["Name"])
    if any(unicodedata.category(c) in _UNPRINTABLE for c in name):
        raise RedfishError(400, "PropertyValueFormatError", f"Name {name!r} has a control character: names are "
                           "shown in tables, logs and terminals (printable characters only)", [repr(name), "Name"])
    links = body.get("Links")
    members = links.get("ResourceBlocks") if isinstance(links, dict) else None
    if not isinstance(members, list) or not members:
        raise RedfishError(400, "PropertyMissing", "Links.ResourceBlocks is required: the blocks to compose",
                           ["Links.ResourceBlocks"])
    names = [_block(m, "Links.ResourceBlocks") for m in members]
    hosts = compute_blocks(view, names)
    if len(hosts) != 1:
        raise RedfishError(400, "PropertyValueConflict", f"a composition takes exactly one Compute block; "
                           f"{len(hosts)} given", ["Links.ResourceBlocks"])
    devices = [n for n in names if n != hosts[0]]
    return ComposeRequest(name.strip(), hosts[0], devices,
                          _number(body, "ProcessorSummary", "CoreCount", MIN_CORES, whole=True),
                          _number(body, "MemorySummary", "TotalSystemMemoryGiB", MIN_MEMORY_GIB))


def compute_blocks(view: View, names: list[str]) -> list[str]:
    """The Compute blocks (machines) among the blocks `names`: a composed system has exactly one."""
    return [n for n in names if n in view.nodes and view.nodes[n].kind == "machine"]


def _block(link: Any, where: str, error: str = "PropertyValueFormatError") -> str:
    """The machine or device a link to a resource block names; 400 naming `where` when it is none."""
    uri = link.get("@odata.id") if isinstance(link, dict) else None
    if not isinstance(uri, str) or not uri.rstrip("/").startswith(BLOCKS + "/"):
        raise RedfishError(400, error, f"{link!r} is not a link to a resource block", [repr(link), where])
    return block_name(uri.rstrip("/").rsplit("/", 1)[1])


@dataclass(frozen=True)
class ActionRequest:
    """An AddResourceBlock or RemoveResourceBlock: the block's machine or device, and the ETags it names."""

    block: str
    block_etag: str | None
    system_etag: str | None


def parse_action(body: Any, action: str) -> ActionRequest:
    """The parameters of `#ComputerSystem.<action>`; 400 naming the parameter at fault."""
    if not isinstance(body, dict):
        raise RedfishError(400, "MalformedJSON", "the body must be a JSON object")
    unknown = sorted(set(body) - ACTION_PARAMETERS)
    if unknown:
        raise RedfishError(400, "ActionParameterUnknown", f"{action} takes no parameter {unknown[0]} (it takes "
                           f"{', '.join(sorted(ACTION_PARAMETERS))})", [action, unknown[0]])
    if "ResourceBlock" not in body:
        raise RedfishError(400, "ActionParameterMissing", f"{action} requires the parameter ResourceBlock "
                           "(a link to the resource block)", [action, "ResourceBlock"])
    etags = []
    for key in ("ResourceBlockETag", "ComputerSystemETag"):
        value = body.get(key)
        if value is not None and not isinstance(value, str):
            raise RedfishError(400, "ActionParameterValueTypeError", f"{key} must be a string, not {value!r}",
                               [repr(value), key, action])
        etags.append(value)
    block = _block(body["ResourceBlock"], "ResourceBlock", "ActionParameterValueFormatError")
    return ActionRequest(block, etags[0], etags[1])


def parse_patch(body: Any, current: list[str]) -> tuple[list[str], list[str]]:
    """A PATCH of a composed system's `Links.ResourceBlocks` as (added, removed); 400 for anything else."""
    if not isinstance(body, dict):
        raise RedfishError(400, "MalformedJSON", "the body must be a JSON object")
    links = body.get("Links")
    members = links.get("ResourceBlocks") if isinstance(links, dict) else None
    if set(body) != {"Links"} or not isinstance(links, dict) or set(links) != {"ResourceBlocks"} \
            or not isinstance(members, list):
        raise RedfishError(400, "PropertyNotWritable", "of a composed system only Links.ResourceBlocks (a list of "
                           "links to resource blocks) may be changed", ["Links.ResourceBlocks"])
    wanted = [_block(m, "Links.ResourceBlocks") for m in members]
    return [b for b in wanted if b not in current], [b for b in current if b not in wanted]


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


#: The suffix of a decomposition's task id (a composition's task id is its slice's id).
DECOMPOSE = ":decompose"
#: How a composition that its owner decomposed is told apart from one that failed.
DECOMPOSED = "decomposed by its owner"


def task_state(s: LiveSlice, suffix: str = "") -> str:
    """Running, Completed or Exception: where a composition (`suffix` "": its composing; DECOMPOSE: its
    decomposition; UPDATE: its last update) stands. An update is done when it is composed again; one that
    was undone (an attach failed), or whose composition was torn down meanwhile, ended in an exception."""
    gone = s.state in (SliceState.TEARING_DOWN, SliceState.DONE)
    if suffix == DECOMPOSE:
        return "Completed" if s.state == SliceState.DONE else "Running"
    if s.state == SliceState.COMPOSING:
        return "Running"
    if suffix == UPDATE:
        return "Exception" if gone or (s.detail or "").startswith(UPDATE_FAILED) else "Completed"
    return "Exception" if gone and not (s.detail or "").startswith(DECOMPOSED) else "Completed"


_TASK_NAME = {"": "compose", DECOMPOSE: "decompose", UPDATE: "update"}


def task(s: LiveSlice, suffix: str = "") -> dict[str, Any]:
    """The Task that follows a composition until it is composed (a decomposition until it is done, an update
    until the composition is composed again): `suffix` as for `task_state`."""
    ident = s.id + suffix
    state = task_state(s, suffix)
    out: dict[str, Any] = {
        "@odata.id": f"{TASKS}/{ident}", "@odata.type": T_TASK, "Id": ident,
        "Name": f"{_TASK_NAME[suffix]} {s.name or s.id}",
        "TaskState": state, "TaskStatus": "Critical" if state == "Exception" else "OK",
        "StartTime": _iso(s.created_at), "TaskMonitor": f"{MONITORS}/{ident}",
    }
    if state == "Exception":
        out["Messages"] = [{"MessageId": "Base.1.19.GeneralError", "Message": s.detail or "the composition ended",
                            "MessageSeverity": "Critical"}]
    return out


__all__ = ["ACTIONS", "DECOMPOSE", "DECOMPOSED", "UPDATE", "ActionRequest", "ComposeRequest", "capabilities",
           "compute_blocks", "parse_action", "parse_compose", "parse_patch", "system", "systems", "task", "task_state"]
