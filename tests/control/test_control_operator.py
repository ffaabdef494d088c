"""An operator's API without surprises: job id prefixes, cancel (202, idempotent) apart from removing
an ended job's record (DELETE: 204, then 404; 409 while live), the history of the controller's
numbers, the OpenAPI document (the 422 for a job that never fits, links for clients and fuzzers),
and the dashboard's pages scoped to the signed-in tenant."""

from __future__ import annotations

import time

import pytest
from control_helpers import body, wait_for
from fastapi.testclient import TestClient

from disagg.control.service import Service

Client = tuple[TestClient, dict[str, str]]


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_any_unique_beginning_of_a_job_id_works_and_an_ambiguous_one_names_the_matches(api: Client) -> None:
    client, tok = api
    alice, bob = h(tok["alice"]), h(tok["bob"])
    ids = [client.post("/v1/jobs", headers=alice, json=body(f"p{i}", gpu=0)).json()["id"] for i in range(2)]
    theirs = client.post("/v1/jobs", headers=bob, json=body("b", gpu=0)).json()["id"]
    first = ids[0]
    short = next(first[:n] for n in range(3, 15) if not ids[1].startswith(first[:n]))
    assert client.get(f"/v1/jobs/{short}", headers=alice).json()["id"] == first
    assert client.get(f"/v1/jobs/{short}/events", headers=alice).json()["job"] == first
    r = client.get("/v1/jobs/j-", headers=alice)
    assert r.status_code == 409 and "ambiguous" in r.json()["detail"]
    assert sorted(p["message"] for p in r.json()["problems"]) == sorted(f"matches {i}" for i in ids)
    assert theirs not in r.text  # another tenant's jobs neither match nor make a prefix ambiguous
    assert client.get(f"/v1/jobs/{theirs[:8]}", headers=alice).status_code == 404
    assert client.get("/v1/jobs/j-%25", headers=alice).status_code == 404  # LIKE's wildcards are literal
    assert len(client.get("/v1/jobs/j-", headers=h(tok["admin"])).json()["problems"]) == 3  # an admin sees all


def test_cancel_is_a_post_that_answers_202_and_may_be_repeated(api: Client, service: Service) -> None:
    client, tok = api
    alice = h(tok["alice"])
    jid = client.post("/v1/jobs", headers=alice, json=body("c", ["sleep", "30"], gpu=1)).json()["id"]
    wait_for(lambda: client.get(f"/v1/jobs/{jid}", headers=alice).json()["state"] == "running", what="running")
    for _ in range(2):
        r = client.post(f"/v1/jobs/{jid}/cancel", headers=alice)
        assert r.status_code == 202 and r.json()["state"] == "cancelled"
    events = [e["why"] for e in client.get(f"/v1/jobs/{jid}/events", headers=alice).json()["events"]]
    assert events.count("cancelled by user") == 2  # the job's move and its slice's, once each


def test_delete_removes_an_ended_jobs_record_and_refuses_a_live_one(api: Client) -> None:
    client, tok = api
    alice = h(tok["alice"])
    live = client.post("/v1/jobs", headers=alice, json=body("l", ["sleep", "30"], gpu=0)).json()["id"]
    r = client.delete(f"/v1/jobs/{live}", headers=alice)
    assert r.status_code == 409 and "cancel it first" in r.json()["detail"]
    assert client.get(f"/v1/jobs/{live}", headers=alice).status_code == 200
    client.post(f"/v1/jobs/{live}/cancel", headers=alice)
    wait_for(lambda: all(sl["state"] == "done" for sl in
                         client.get("/v1/slices", headers=alice).json()["slices"] if sl["job"] == live),
             what="the cancelled job's slice to be torn down")
    r = client.delete(f"/v1/jobs/{live}", headers=alice)
    assert r.status_code == 204 and r.content == b""
    for path in (f"/v1/jobs/{live}", f"/v1/jobs/{live}/events", f"/v1/jobs/{live}/logs"):
        assert client.get(path, headers=alice).status_code == 404
    assert client.delete(f"/v1/jobs/{live}", headers=alice).status_code == 404
    assert all(sl["job"] != live for sl in client.get("/v1/slices", headers=h(tok["admin"])).json()["slices"])


def test_the_history_of_the_controllers_numbers(api: Client, service: Service) -> None:
    client, tok = api
    alice = h(tok["alice"])
    service.controller.history.every_s = 0.05
    client.post("/v1/jobs", headers=alice, json=body("hist", ["sleep", "30"], gpu=2))

    def sampled_in_use() -> bool:
        points = client.get("/v1/history", headers=alice, params={"from": time.time() - 60, "step": 1}).json()
        return any(p["devices_in_use"].get("gpu", 0) >= 2 for p in points["points"])

    wait_for(sampled_in_use, what="a sample with the job's two GPUs in use")
    data = client.get("/v1/history", headers=alice, params={"from": time.time() - 60, "step": 1}).json()
    assert data["step"] == 1 and data["points"] == sorted(data["points"], key=lambda p: p["at"])
    last = data["points"][-1]
    assert last["devices_total"] == {"gpu": 5, "nvme": 4} and last["link_load_gbps"]["up:iobox0"] > 0
    assert last["rounds_per_min"] is not None
    assert client.get("/v1/history", headers=alice, params={"from": 10, "to": 5}).json()["points"] == []
    wide = client.get("/v1/history", headers=alice, params={"from": 0, "to": 1e6, "step": 1}).json()
    assert wide["step"] == 1e6 / 2000  # at most 2,000 buckets: the step used is in the answer
    for params, field in (({"step": 0}, "step"), ({"from": "x"}, "from"), ({"to": -1}, "to")):
        r = client.get("/v1/history", headers=alice, params=params)
        assert r.status_code == 422 and r.json()["problems"][0]["field"] == field, params
    assert client.get("/v1/history").status_code == 401


def test_the_openapi_document_states_what_a_client_meets(api: Client) -> None:
    client, _ = api
    spec = client.get("/openapi.json").json()
    post = spec["paths"]["/v1/jobs"]["post"]
    never = post["responses"]["422"]["content"]["application/json"]["examples"]["never-fits"]["value"]
    assert "can never fit" in never["detail"] and "never fit" in post["responses"]["422"]["description"]
    ops = {o["operationId"] for methods in spec["paths"].values() for o in methods.values()}
    links = post["responses"]["201"]["links"]
    assert {link["operationId"] for link in links.values()} <= ops and len(links) == 8
    assert set(spec["paths"]["/v1/jobs/{job_id}"]) == {"get", "delete"}
    assert spec["paths"]["/v1/jobs/{job_id}/cancel"]["post"]["responses"].keys() >= {"202", "404", "409"}
    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        assert "/static-offline-docs/" in html and "cdn.jsdelivr" not in html and "unpkg" not in html


@pytest.mark.parametrize("path", ["/ui/queue", "/ui/fabric", "/ui/history", "/ui/jobs/j-0"])
def test_every_page_asks_to_sign_in_first(api: Client, path: str) -> None:
    client, _ = api
    r = client.get(path, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")


def test_a_tenant_sees_only_its_jobs_on_the_dashboard_and_an_admin_sees_all(api: Client) -> None:
    client, tok = api
    mine = client.post("/v1/jobs", headers=h(tok["alice"]), json=body("mine", gpu=1)).json()["id"]
    theirs = client.post("/v1/jobs", headers=h(tok["bob"]), json=body("theirs", gpu=1)).json()["id"]
    client.post("/login", data={"token": tok["alice"]})
    page = client.get("/ui/queue").text
    assert mine in page and theirs not in page
    assert client.get(f"/ui/jobs/{theirs}").status_code == 404
    client.post("/logout")
    assert client.get("/ui/queue", follow_redirects=False).status_code == 303
    client.post("/login", data={"token": tok["admin"]})
    page = client.get("/ui/queue").text
    assert mine in page and theirs in page
    only_bob = client.get("/ui/queue?tenant=bob").text
    assert theirs in only_bob and mine not in only_bob
    live = client.get("/ui/queue?partial=1").text
    assert live.lstrip().startswith('<p class="stamp">') and "<html" not in live
    # a form posted from another site is refused (the cookie is SameSite=Strict besides)
    r = client.post(f"/ui/jobs/{mine}/cancel", headers={"Origin": "https://evil.example"}, follow_redirects=False)
    assert r.status_code == 403
    r = client.post(f"/ui/jobs/{mine}/cancel", follow_redirects=False)
    assert r.status_code == 303 and client.get(f"/v1/jobs/{mine}", headers=h(tok["alice"])).json()["state"] in (
        "cancelled", "completed")


def test_machines_read_correctly_a_pool_in_use_and_a_node_behind_a_dropped_link(api: Client) -> None:
    """A pool hosts no slice, but its attached devices are in use; a node whose uplink dropped is
    unreachable (it read `free` before, then `failed`)."""
    client, tok = api
    alice, admin = h(tok["alice"]), h(tok["admin"])
    jid = client.post("/v1/jobs", headers=alice, json=body("m", ["sleep", "30"], gpu=1)).json()["id"]
    wait_for(lambda: client.get(f"/v1/jobs/{jid}", headers=alice).json()["state"] == "running", what="running")
    used = client.get(f"/v1/jobs/{jid}", headers=alice).json()["placement"][0]["machine"]
    idle = next(n for n in ("node0", "node1", "node2", "node3") if n != used)
    client.post(f"/v1/links/up:{idle}/fail", headers=admin)
    machines = {m["id"]: m for m in client.get("/v1/machines", headers=alice).json()["machines"]}
    assert machines["iobox0"]["state"] == "attached" and machines["iobox1"]["state"] == "free"
    assert machines[idle]["state"] == "unreachable" and machines[used]["state"] == "attached"
    client.post(f"/v1/links/up:{idle}/repair", headers=admin)
    client.post(f"/v1/jobs/{jid}/cancel", headers=alice)
