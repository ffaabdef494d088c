"""Helpers of the Redfish tests: a `disagg serve` (A) whose Redfish service another disagg (B) composes on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from control_helpers import Server, admin_token

from disagg.fabric.redfish_client import RedfishClient
from disagg.fabric.redfish_discovery import discover
from disagg.store import Store

FAST = ["--latency-scale", "0.002", "--tick-s", "0.02", "--round-gap-s", "0.02"]
SHARED_CSDL = Path(__file__).resolve().parents[3] / "shared" / "redfish" / "csdl"


def start_a(root: Path, cluster: Path | None = None, updatable: bool = True) -> tuple[Server, dict[str, str]]:
    """Disagg A: `disagg serve` on the emulated fabric (the testbed, or `cluster`); tokens admin, alice, bob.
    `updatable`: its composed systems take AddResourceBlock / RemoveResourceBlock (`redfish_updatable`)."""
    root.mkdir(parents=True, exist_ok=True)
    db = f"sqlite:///{root / 'a.db'}"
    (root / "a.yaml").write_text(yaml.safe_dump({"redfish_updatable": updatable}))
    server = Server(root, db, [*FAST, "--config", str(root / "a.yaml"),
                               *(["--cluster", str(cluster)] if cluster else [])])
    server.start()
    server.ready()
    store = Store(db)
    tokens = {"admin": admin_token(root), "alice": store.create_token("alice"), "bob": store.create_token("bob")}
    store.close()
    return server, tokens


def discover_spec(url: str, user: str, token: str, path: Path) -> dict[str, Any]:
    client = RedfishClient(url, user, token)
    try:
        spec, _ = discover(client)
    finally:
        client.close()
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec


def start_b(root: Path, a_url: str, user: str, token: str, marker: str = "disagg-b") -> Server:
    """Disagg B: its cluster from discovering A, its fabric A's Redfish service."""
    root.mkdir(parents=True, exist_ok=True)
    discover_spec(a_url, user, token, root / "cluster.yaml")
    (root / "pw").write_text(token)
    (root / "b.yaml").write_text(yaml.safe_dump({
        "cluster": str(root / "cluster.yaml"),
        "fabric": {"driver": "redfish", "url": a_url, "username": user, "password_file": str(root / "pw"),
                   "marker": marker, "poll_s": 0.1, "backoff_s": 0.05}}))
    server = Server(root, f"sqlite:///{root / 'b.db'}", [*FAST, "--config", str(root / "b.yaml")])
    server.start()
    server.ready()
    return server


def systems(url: str, token: str) -> list[dict[str, Any]]:
    """A's composed systems as the admin sees them."""
    h = {"Authorization": f"Bearer {token}"}
    members = httpx.get(f"{url}/redfish/v1/Systems", headers=h).json()["Members"]
    got = [httpx.get(url + m["@odata.id"], headers=h) for m in members]
    return [r.json() for r in got if r.status_code == 200]  # (one decomposed meanwhile is gone)


def wait(predicate: Any, timeout: float = 30.0, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
