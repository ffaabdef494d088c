"""Any unique beginning of an id, for every kind of id a route takes in its path (jobs have theirs in
test_control_operator.py): a slice, a device, a link, a tenant's name. Unique → that one; shared →
409 naming every match; none → 404 naming what was typed. A token's id is taken whole."""

from __future__ import annotations

import pytest
from control_helpers import body, wait_for
from fastapi.testclient import TestClient

Client = tuple[TestClient, dict[str, str]]


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def matches(r: object) -> list[str]:
    """The ids a 409 names (each is also in `problems`)."""
    return sorted(p["message"].removeprefix("matches ") for p in r.json()["problems"])  # type: ignore[attr-defined]


def unique_beginning(whole: str, others: list[str]) -> str:
    return next(whole[:n] for n in range(1, len(whole) + 1) if not any(o.startswith(whole[:n]) for o in others))


@pytest.mark.parametrize(("path", "unique", "whole", "shared", "named"), [
    ("/v1/devices/{}/drain", "iobox0/gpu3", "iobox0/gpu3", "iobox0/gpu", [f"iobox0/gpu{i}" for i in range(5)]),
    ("/v1/devices/{}/repair", "iobox1/nvme2", "iobox1/nvme2", "iobox1/", [f"iobox1/nvme{i}" for i in range(4)]),
    ("/v1/links/{}/fail", "rack", "rack:r0", "up:node", [f"up:node{i}" for i in range(4)]),
    ("/v1/links/{}/repair", "up:iobox1", "up:iobox1", "up:iobox", ["up:iobox0", "up:iobox1"]),
], ids=["device-drain", "device-repair", "link-fail", "link-repair"])
def test_inventory_ids_by_a_unique_beginning(api: Client, path: str, unique: str, whole: str, shared: str,
                                             named: list[str]) -> None:
    client, tok = api
    admin = h(tok["admin"])
    r = client.post(path.format(unique), headers=admin)
    assert r.status_code == 200 and r.json()["id"] == whole
    r = client.post(path.format(shared), headers=admin)
    assert r.status_code == 409 and "ambiguous" in r.json()["detail"] and matches(r) == named
    r = client.post(path.format("nope-9"), headers=admin)
    assert r.status_code == 404 and "'nope-9'" in r.json()["detail"]
    assert client.post(path.format(unique), headers=h(tok["alice"])).status_code == 403  # still admin only


def test_a_device_named_whole_wins_over_longer_ids_it_begins(api: Client) -> None:
    """`iobox0/gpu1` is the whole id of one device, never ambiguous (as `node1` would begin `node10`)."""
    client, tok = api
    assert client.post("/v1/devices/iobox0/gpu1/drain", headers=h(tok["admin"])).json()["drained"] is True


def test_slice_ids_by_a_unique_beginning_tenant_scoped(api: Client) -> None:
    client, tok = api
    alice, bob = h(tok["alice"]), h(tok["bob"])
    jobs = [client.post("/v1/jobs", headers=alice, json=body(f"s{i}", ["sleep", "30"], gpu=0)).json()["id"]
            for i in range(2)]
    theirs = client.post("/v1/jobs", headers=bob, json=body("b", ["sleep", "30"], gpu=0)).json()["id"]

    def slice_of(job_id: str, who: dict[str, str]) -> str:
        wait_for(lambda: client.get(f"/v1/jobs/{job_id}", headers=who).json()["slice"] is not None, what="a slice")
        return str(client.get(f"/v1/jobs/{job_id}", headers=who).json()["slice"])

    mine = [slice_of(j, alice) for j in jobs]
    other = slice_of(theirs, bob)
    short = unique_beginning(mine[0], [mine[1]])
    r = client.get(f"/v1/slices/{short}", headers=alice)
    assert r.status_code == 200 and r.json()["id"] == mine[0] and r.json()["job"] == jobs[0]
    assert r.json()["steps"] and r.json()["steps"][0]["op"]  # one slice comes with its steps
    r = client.get("/v1/slices/s-", headers=alice)
    assert r.status_code == 409 and matches(r) == sorted(mine)  # bob's slice makes nothing ambiguous for alice
    assert client.get(f"/v1/slices/{other}", headers=alice).status_code == 404  # nor can she see it
    assert matches(client.get("/v1/slices/s-", headers=h(tok["admin"]))) == sorted([*mine, other])
    r = client.get("/v1/slices/s-nope", headers=alice)
    assert r.status_code == 404 and "'s-nope'" in r.json()["detail"]


def test_tenant_names_by_a_unique_beginning(api: Client) -> None:
    client, tok = api
    client.post("/v1/tokens", headers=h(tok["admin"]), json={"tenant": "albert"})
    admin = h(tok["admin"])
    r = client.get("/v1/tenants/bo", headers=admin)
    assert r.status_code == 200 and r.json()["name"] == "bob"
    r = client.get("/v1/tenants/al", headers=admin)
    assert r.status_code == 409 and matches(r) == ["albert", "alice"]
    r = client.get("/v1/tenants/al", headers=h(tok["alice"]))  # alice sees only herself: not ambiguous to her
    assert r.status_code == 200 and r.json()["name"] == "alice"
    assert client.get("/v1/tenants/bob", headers=h(tok["alice"])).status_code == 404
    r = client.get("/v1/tenants/zed", headers=admin)
    assert r.status_code == 404 and "'zed'" in r.json()["detail"]


def test_a_token_id_is_taken_whole(api: Client) -> None:
    """Token ids are small integers a revocation deletes: "1" must never revoke token 12."""
    client, tok = api
    admin = h(tok["admin"])
    for i in range(25):
        client.post("/v1/tokens", headers=admin, json={"tenant": f"t{i}"})
    ids = [t["id"] for t in client.get("/v1/tokens", headers=admin).json()["tokens"] if not t["admin"]]
    low = next(i for i in ids if any(str(j).startswith(str(i)) and j != i for j in ids))  # 2 begins 20, …
    assert client.delete(f"/v1/tokens/{low}", headers=admin).status_code == 204
    r = client.delete(f"/v1/tokens/{low}", headers=admin)  # again: not a beginning of a longer id
    assert r.status_code == 404 and f"no token {low}" in r.json()["detail"]
    assert len(client.get("/v1/tokens", headers=admin).json()["tokens"]) == len(ids) + 1 - 1
