"""The fabric page: racks, their machines and pools, each with its devices by state (free, attached,
drained, unreachable, failed) and its uplink's load against its bandwidth; failures first and in red.

A node's word says what an operator needs: a machine or pool behind a down link (its uplink, or its
rack's) is `unreachable` (its devices, though healthy, cannot be used: the store's views derive it);
a pool reads `all attached`, `3 of 5 attached` or `free` from its devices, not from slices hosted on
it (a pool hosts none). Past FULL_NODES machines and pools the page shows racks with counts, the links
that are down or loaded, and the devices that need an operator, instead of a card per node.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from disagg.api.dashboard.auth import Viewer
from disagg.api.dashboard.render import page
from disagg.api.deps import StoreDep
from disagg.model.allocation import capacity
from disagg.model.states import DeviceState, LinkState
from disagg.store.ports import ApiPort

router = APIRouter(include_in_schema=False)

#: Past this many machines and pools, the summary (a card per node of 12,500 machines is no page).
FULL_NODES = 200
#: Rows of each list in the summary.
MAX_ROWS = 200
STATES = tuple(DeviceState)


def node_word(node: dict[str, Any], devices: list[dict[str, Any]], link: dict[str, Any] | None,
              rack_link: dict[str, Any] | None = None) -> tuple[str, str]:
    """(word, css class) for a machine or pool: unreachable > failed > attached (how many) > in use > free."""
    if node["state"] == DeviceState.UNREACHABLE:
        cut = next((lk["id"] for lk in (link, rack_link) if lk is not None and lk["state"] == LinkState.DOWN), None)
        return (f"unreachable: {cut} is down" if cut else DeviceState.UNREACHABLE), DeviceState.UNREACHABLE
    states = [d["state"] for d in devices]
    if states and all(st == DeviceState.FAILED for st in states):
        return "all devices failed", DeviceState.FAILED
    attached = states.count(DeviceState.ATTACHED)
    if node["kind"] == "pool":
        if states and attached == len(states):
            return "all attached", DeviceState.ATTACHED
        if attached:
            return f"{attached} of {len(states)} attached", DeviceState.ATTACHED
        return DeviceState.FREE, DeviceState.FREE
    if node["slices"]:
        return f"in use by {len(node['slices'])} slice(s)", DeviceState.ATTACHED
    return DeviceState.FREE, DeviceState.FREE


def fabric_full(store: ApiPort) -> dict[str, Any]:
    """Every rack with a card per machine and pool (small inventories)."""
    links = {lk["id"]: lk for lk in store.links_view()}
    by_node: dict[str, list[dict[str, Any]]] = {}
    for d in store.devices_view():
        by_node.setdefault(d["location"], []).append(d)
    racks: dict[str, dict[str, Any]] = {}
    for node in store.machines_view():
        devices = by_node.get(node["id"], [])
        link = links.get(f"up:{node['id']}")
        word, css = node_word(node, devices, link, links.get(f"rack:{node['location']}"))
        counts = {st: sum(1 for d in devices if d["state"] == st) for st in STATES}
        rack = racks.setdefault(node["location"], {"name": node["location"], "nodes": [],
                                                   "link": links.get(f"rack:{node['location']}")})
        rack["nodes"].append({**node, "devices": devices, "link": link, "word": word, "css": css, "counts": counts})
    return {"racks": list(racks.values()), "links": list(links.values()),
            "down": [lk for lk in links.values() if lk["state"] == LinkState.DOWN],
            "attention": [d for ds in by_node.values() for d in ds
                          if d["state"] in (DeviceState.FAILED, DeviceState.DRAINED)]}


def fabric_summary(store: ApiPort, nodes: dict[tuple[str, str], int]) -> dict[str, Any]:
    """Racks with counts, the links down or loaded (busiest first), the devices that need an operator."""
    by_rack = store.device_counts("rack")
    links = store.links_view()
    rows = [{"name": rack, "machines": nodes.get((rack, "machine"), 0), "pools": nodes.get((rack, "pool"), 0),
             "counts": {st: by_rack.get((st, rack), 0) for st in STATES}}
            for rack in sorted({rack for rack, _ in nodes})]
    loaded = sorted((lk for lk in links if lk["load_gbps"] > 0), key=lambda lk: -lk["utilisation"])
    return {"summary": rows, "down": [lk for lk in links if lk["state"] == LinkState.DOWN][:MAX_ROWS],
            "loaded": loaded[:MAX_ROWS], "attention": store.attention_devices(MAX_ROWS)}


@router.get("/ui/fabric", response_class=HTMLResponse)
def fabric_page(request: Request, who: Viewer, store: StoreDep,
                partial: Annotated[bool, Query()] = False) -> HTMLResponse:
    nodes = store.node_counts()
    counts = store.counts()["devices"]
    if sum(nodes.values()) <= FULL_NODES:
        data = {**fabric_full(store), "summary": None}
        data["capacity"] = capacity(n for r in data["racks"] for n in (x["allocation"] for x in r["nodes"]))
    else:
        data = {**fabric_summary(store, nodes), "racks": [], "capacity": None}
    return page(request, "fabric.html", who, partial, **data, device_counts=counts, states=STATES,
                max_rows=MAX_ROWS, title="Fabric")


__all__ = ["FULL_NODES", "fabric_full", "fabric_summary", "node_word", "router"]
