"""Discovery round trips: a disagg serving Redfish over a cluster spec of some shape, discovered, gives back a
valid cluster spec with the same machines, pools, racks and devices (same ids, kinds, models), each keeping
its block's URI; blocks composed by someone else come back held. And the redfish driver's options."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_helpers import make_service
from fastapi.testclient import TestClient

from disagg.api import create_app
from disagg.fabric.emulated import OperationLatencies
from disagg.fabric.redfish_client import RedfishClient
from disagg.fabric.redfish_discovery import discover, safe_name
from disagg.fabric.registry import DriverOptions, UnknownDriverError, make_driver
from disagg.model import Cluster, parse_cluster

SHAPES: dict[str, dict[str, Any]] = {
    "testbed": yaml.safe_load((Path(__file__).resolve().parents[2] / "src/disagg/control/default_cluster.yaml")
                              .read_text()),
    "every-kind-two-racks": {
        "machines": [{"name": "c0", "rack": "ra", "cpus": 32, "memory_gb": 256,
                      "devices": {"gpu": {"model": "A100", "count": 2}}},
                     {"name": "c1", "rack": "rb", "cpus": 16, "memory_gb": 64}],
        "pools": [{"name": "gpubox", "rack": "ra", "devices": {"gpu": [{"model": "H100", "count": 3},
                                                                        {"model": "L4", "count": 1}]}},
                  {"name": "fpgabox", "rack": "rb", "devices": {"fpga": {"model": "U280", "count": 2}}},
                  {"name": "flash", "rack": "rb", "devices": {"nvme": {"model": "PM1733", "count": 2,
                                                                        "capacity": 3.84}}},
                  {"name": "cxl", "rack": "ra", "devices": {"memory": {"model": "CXL-DDR5", "count": 2,
                                                                        "capacity": 512}}}]},
    "one-machine": {"machines": [{"name": "solo", "cpus": 4, "memory_gb": 8}]},
}


def _served(tmp_path: Path, spec: dict[str, Any]):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec))
    svc = make_service(tmp_path, cluster=str(path))
    svc.controller.start()
    token = svc.store.create_token("alice")
    test_client = TestClient(create_app(svc.jobs))
    client = RedfishClient(str(test_client.base_url), "alice", token, transport=test_client._transport)
    return svc, client


def _shape(c: Cluster) -> tuple[Any, ...]:
    return (sorted((m.name, m.rack, m.cpus, m.memory_gb) for m in c.machines),
            sorted((p.name, p.rack) for p in c.pools),
            sorted((d.id, d.kind, d.model, d.capacity) for d in c.devices))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_discovery_round_trips_to_a_valid_cluster_spec(tmp_path: Path, shape: str) -> None:
    svc, client = _served(tmp_path, SHAPES[shape])
    try:
        spec, warnings = discover(client)
    finally:
        client.close()
        svc.close()
    assert warnings == []
    found = parse_cluster(spec, "discovered")
    assert _shape(found) == _shape(parse_cluster(SHAPES[shape]))
    assert all(m.redfish_uri == f"/redfish/v1/CompositionService/ResourceBlocks/{m.name}" for m in found.machines)
    assert all(d.redfish_uri == "/redfish/v1/CompositionService/ResourceBlocks/" + d.id.replace("/", ":")
               for d in found.devices)
    assert spec.get("allocations", []) == []


def test_blocks_composed_by_others_are_held_in_the_discovered_spec(tmp_path: Path) -> None:
    svc, client = _served(tmp_path, SHAPES["every-kind-two-racks"])
    try:
        sid = svc.store.compose("bob", "bob's", "c1", ["gpubox/gpu1", "flash/nvme0"])
        svc.controller.wake()
        end = time.monotonic() + 20
        while svc.store.any_slice(sid).state != "composed" and time.monotonic() < end:  # type: ignore[union-attr]
            time.sleep(0.05)
        spec, _ = discover(client)
    finally:
        client.close()
        svc.close()
    found = parse_cluster(spec, "discovered")
    held = {d for a in found.allocations for d in a.devices}
    assert held == {"gpubox/gpu1", "flash/nvme0"}
    assert all(a.job.startswith("foreign:") for a in found.allocations)
    whole = [a for a in found.allocations if a.machine == "c1" and a.cpus == 16]
    assert whole, "the machine composed whole is held whole"


def test_safe_names_follow_the_spec_rules() -> None:
    assert safe_name("Rack 1/A", "r") == "Rack-1-A"
    assert safe_name("__", "fallback") == "fallback"
    assert safe_name("-x", "f") == "x"


@pytest.mark.parametrize(("options", "message"), [
    ({}, "fabric.url: None is not allowed"),
    ({"url": "ftp://x"}, "fabric.url: 'ftp://x' is not allowed"),
    ({"url": "http://x", "colour": "red"}, "fabric.colour: unknown option for the 'redfish' driver"),
    ({"url": "http://x", "insecure": "yes"}, "fabric.insecure: 'yes' is not allowed; expected bool"),
    ({"url": "http://x", "password": "a", "password_file": "/f"}, "give password or password_file, not both"),
], ids=["no-url", "bad-url", "unknown", "bad-type", "both-passwords"])
def test_the_redfish_driver_refuses_bad_options_naming_them(tmp_path: Path, options: dict[str, Any],
                                                           message: str) -> None:
    cluster = parse_cluster(SHAPES["one-machine"])
    with pytest.raises(UnknownDriverError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_driver("redfish", DriverOptions(cluster, tmp_path, OperationLatencies(), options))


def test_held_devices_are_on_the_machine_of_their_system_and_the_network_round_trips(tmp_path: Path) -> None:
    """Issue 25 (defect 4): devices composed with c1 are held on c1 (not on the first machine), and the
    uplinks and the racks' uplink come back as the served spec has them."""
    shape = {**SHAPES["every-kind-two-racks"], "network": {"rack_uplink_gbps": 400.0}}
    shape["machines"] = [{**m, "uplink_gbps": 25.0 + i} for i, m in enumerate(shape["machines"])]
    shape["pools"] = [{**p, "uplink_gbps": 80.0 + i} for i, p in enumerate(shape["pools"])]
    svc, alice = _served(tmp_path, shape)
    alice.close()
    test_client = TestClient(create_app(svc.jobs))  # an admin sees every system, so whose devices they are
    client = RedfishClient(str(test_client.base_url), "ops", svc.store.create_token("ops", admin=True),
                           transport=test_client._transport)
    try:
        sid = svc.store.compose("bob", "bob's", "c1", ["gpubox/gpu1", "flash/nvme0"])
        svc.controller.wake()
        end = time.monotonic() + 20
        while svc.store.any_slice(sid).state != "composed" and time.monotonic() < end:  # type: ignore[union-attr]
            time.sleep(0.05)
        spec, warnings = discover(client)
    finally:
        client.close()
        svc.close()
    found = parse_cluster(spec, "discovered")
    held = {d: a.machine for a in found.allocations for d in a.devices}
    assert held == {"gpubox/gpu1": "c1", "flash/nvme0": "c1"}
    assert spec["network"] == {"rack_uplink_gbps": 400.0} and found.rack_uplink_gbps == 400.0
    assert {m.name: m.uplink_gbps for m in found.machines} == {"c0": 25.0, "c1": 26.0}
    assert {p.name: p.uplink_gbps for p in found.pools} == {p["name"]: p["uplink_gbps"] for p in shape["pools"]}
    assert not [w for w in warnings if "uplink" in w]
