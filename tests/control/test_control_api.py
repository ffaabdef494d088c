"""The REST API: auth and tenants, validation errors that name the field, idempotency keys, logs,
admin-only routes, metrics, the dashboard and the OpenAPI document."""

from __future__ import annotations

from pathlib import Path

from control_helpers import body, make_service, wait_for
from fastapi.testclient import TestClient

from disagg.api import create_app

Client = tuple[TestClient, dict[str, str]]


def h(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def test_the_issue_example_is_accepted_and_runs(api: Client) -> None:
    client, tok = api
    r = client.post("/v1/jobs", headers=h(tok["alice"]), json={
        "name": "train", "image": "rodinia/nw", "command": ["sh", "-c", "echo hi"],
        "tasks": {"count": 1, "cpus": 1, "memory_gb": 1, "gpu": 1}, "slo_s": 600, "importance": 1.0})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "queued" and job["id"].startswith("j-")

    def done() -> bool:
        return client.get(f"/v1/jobs/{job['id']}", headers=h(tok["alice"])).json()["state"] == "completed"

    wait_for(done, what="the job to complete")
    got = client.get(f"/v1/jobs/{job['id']}", headers=h(tok["alice"])).json()
    assert got["slice"] and got["placement"][0]["devices"][0]["kind"] == "gpu"
    logs = client.get(f"/v1/jobs/{job['id']}/logs", headers=h(tok["alice"]))
    assert logs.status_code == 200 and logs.json()["logs"] == "hi\n"
    events = client.get(f"/v1/jobs/{job['id']}/events", headers=h(tok["alice"]))
    assert events.status_code == 200, events.text
    moves = [(e["from"], e["to"]) for e in events.json()["events"] if e["subject"] == "job"]
    assert moves == [(None, "queued"), ("queued", "composing"), ("composing", "running"), ("running", "completed")]
    assert client.get(f"/v1/jobs/{job['id']}/events", headers=h(tok["bob"])).status_code == 404


def test_no_token_or_a_bad_one_answers_401(api: Client) -> None:
    client, _ = api
    for path in ("/v1/jobs", "/v1/slices", "/v1/machines", "/v1/devices"):
        r = client.get(path)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert client.get(path, headers=h("dg_nope")).status_code == 401
    assert client.post("/v1/jobs", json=body()).status_code == 401


def test_a_tenant_sees_and_touches_only_its_own_jobs(api: Client) -> None:
    client, tok = api
    jid = client.post("/v1/jobs", headers=h(tok["alice"]), json=body(gpu=0, command=["sleep", "5"])).json()["id"]
    assert client.get(f"/v1/jobs/{jid}", headers=h(tok["bob"])).status_code == 404
    assert client.post(f"/v1/jobs/{jid}/cancel", headers=h(tok["bob"])).status_code == 404
    assert client.delete(f"/v1/jobs/{jid}", headers=h(tok["bob"])).status_code == 404
    assert client.get(f"/v1/jobs/{jid}/logs", headers=h(tok["bob"])).status_code == 404
    assert client.get("/v1/jobs", headers=h(tok["bob"])).json()["jobs"] == []
    assert [j["id"] for j in client.get("/v1/jobs", headers=h(tok["alice"])).json()["jobs"]] == [jid]
    assert [j["id"] for j in client.get("/v1/jobs", headers=h(tok["admin"])).json()["jobs"]] == [jid]
    assert client.get("/v1/jobs/j-000000000000", headers=h(tok["alice"])).status_code == 404
    r = client.post(f"/v1/jobs/{jid}/cancel", headers=h(tok["alice"]))
    assert r.status_code == 202 and r.json()["state"] == "cancelled"


def test_bad_input_names_the_field_and_writes_nothing(api: Client) -> None:
    client, tok = api
    cases = [
        ({**body(), "tasks": {"count": 0}}, "tasks.count"),
        ({**body(), "colour": "red"}, "colour"),
        ({**body(), "importance": True}, "importance"),
        ({**body(), "command": []}, "command"),
        ({**body(), "name": "bad name!"}, "name"),
        ({k: v for k, v in body().items() if k != "command"}, "command"),
    ]
    for payload, field in cases:
        r = client.post("/v1/jobs", headers=h(tok["alice"]), json=payload)
        assert r.status_code == 422, payload
        assert field in [p["field"] for p in r.json()["problems"]], r.json()
    r = client.post("/v1/jobs", headers=h(tok["alice"]), json=body(gpu=9))
    assert r.status_code == 422 and "never fit" in r.json()["detail"] and "the cluster has 5" in r.json()["detail"]
    assert client.get("/v1/jobs", headers=h(tok["alice"])).json()["jobs"] == []
    assert client.get("/v1/jobs?state=sleeping", headers=h(tok["alice"])).status_code == 422


def test_idempotency_keys_return_the_first_job_and_refuse_another_body(api: Client) -> None:
    client, tok = api
    first = client.post("/v1/jobs", headers=h(tok["alice"], **{"Idempotency-Key": "k-1"}), json=body())
    again = client.post("/v1/jobs", headers=h(tok["alice"], **{"Idempotency-Key": "k-1"}), json=body())
    assert first.status_code == 201 and again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    other = client.post("/v1/jobs", headers=h(tok["alice"], **{"Idempotency-Key": "k-1"}), json=body("other"))
    assert other.status_code == 409 and "k-1" in other.json()["detail"]
    bobs = client.post("/v1/jobs", headers=h(tok["bob"], **{"Idempotency-Key": "k-1"}), json=body())
    assert bobs.status_code == 201 and bobs.json()["id"] != first.json()["id"]  # keys are per tenant
    assert len(client.get("/v1/jobs", headers=h(tok["admin"])).json()["jobs"]) == 2


def test_device_admin_routes_need_an_admin_and_change_the_inventory(api: Client) -> None:
    client, tok = api
    assert client.post("/v1/devices/iobox0/gpu1/drain", headers=h(tok["alice"])).status_code == 403
    r = client.post("/v1/devices/iobox0/gpu1/drain", headers=h(tok["admin"]))
    assert r.status_code == 200 and r.json()["state"] == "drained"
    r = client.post("/v1/devices/iobox0/gpu2/fail", headers=h(tok["admin"]))
    assert r.status_code == 200 and r.json()["state"] == "failed"
    assert client.post("/v1/devices/iobox9/gpu0/fail", headers=h(tok["admin"])).status_code == 404
    devices = {d["id"]: d for d in client.get("/v1/devices", headers=h(tok["bob"])).json()["devices"]}
    assert devices["iobox0/gpu1"]["state"] == "drained" and devices["iobox0/gpu2"]["state"] == "failed"
    assert devices["iobox0/gpu0"] == {"id": "iobox0/gpu0", "kind": "gpu", "model": "P100", "location": "iobox0",
                                      "state": "free", "slice": None, "health": "healthy", "drained": False,
                                      "reachable": True}
    for dev in ("iobox0/gpu1", "iobox0/gpu2"):
        assert client.post(f"/v1/devices/{dev}/repair", headers=h(tok["admin"])).json()["state"] == "free"
    machines = client.get("/v1/machines", headers=h(tok["bob"])).json()["machines"]
    assert {m["id"] for m in machines} == {"node0", "node1", "node2", "node3", "iobox0", "iobox1"}
    assert all({"id", "kind", "location", "state", "slice"} <= set(m) for m in machines)


def test_metrics_dashboard_health_and_openapi(api: Client) -> None:
    client, tok = api
    client.post("/v1/jobs", headers=h(tok["alice"]), json=body(gpu=0))
    assert client.get("/metrics").status_code == 401  # behind a token unless metrics_public
    metrics = client.get("/metrics", headers=h(tok["alice"])).text
    for name in ("disagg_queue_length", 'disagg_slices{state="running"}', 'disagg_devices{state="free"}',
                 "disagg_placement_round_seconds", "disagg_slice_step_seconds", 'disagg_link_up{link="up:iobox0"} 1.0',
                 'disagg_link_load_gbps{link="rack:r0"}'):
        assert name in metrics
    # the dashboard is behind a sign-in: without a session, `/` leads to /login
    first = client.get("/", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/login?next=%2F"
    signed = client.post("/login", data={"token": tok["bob"], "next": "/ui/fabric"}, follow_redirects=False)
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/fabric"
    cookie = signed.headers["set-cookie"]
    # the cookie holds a server-side session's key, never the token (issue 22: logout ends the session)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and tok["bob"] not in cookie
    page = client.get("/ui/fabric")
    assert page.status_code == 200 and "iobox0/gpu0" in page.text and "node3" in page.text
    assert client.get("/healthz").json()["status"] == "ok"
    spec = client.get("/openapi.json").json()
    post = spec["paths"]["/v1/jobs"]["post"]
    assert {"201", "401", "409", "422"} <= set(post["responses"])
    assert spec["components"]["schemas"]["JobIn"]["additionalProperties"] is False


def test_a_link_fault_through_the_api_touches_only_the_slices_that_cross_it(api: Client) -> None:
    client, tok = api
    admin, alice = h(tok["admin"]), h(tok["alice"])

    def submit(retries: int, **tasks: int) -> str:
        r = client.post("/v1/jobs", headers=alice,
                        json={**body("f", ["sleep", "30"], cpus=2.0, **tasks), "max_retries": retries})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def get(job_id: str) -> dict[str, object]:
        return dict(client.get(f"/v1/jobs/{job_id}", headers=alice).json())

    once, again, disk = submit(0, gpu=1), submit(2, gpu=1), submit(2, gpu=0, nvme=1)
    for j in (once, again, disk):
        wait_for(lambda j=j: get(j)["state"] == "running", what=f"{j} to run")
    slices = {j: get(j)["slice"] for j in (once, again, disk)}
    links = {lk["id"]: lk for lk in client.get("/v1/links", headers=alice).json()["links"]}
    assert links["up:iobox0"]["gbps"] == 40 and links["up:iobox0"]["state"] == "up"
    assert set(links["up:iobox0"]["slices"]) == {slices[once], slices[again]}
    assert links["up:iobox1"]["slices"] == [slices[disk]]
    assert links["up:iobox0"]["load_gbps"] == sum(
        d["network_gbps"] for j in (once, again) for t in get(j)["placement"] for d in t["devices"])  # type: ignore[attr-defined]

    assert client.post("/v1/links/up:iobox0/fail", headers=alice).status_code == 403
    assert client.post("/v1/links/up:nowhere/fail", headers=admin).status_code == 404
    r = client.post("/v1/links/up:iobox0/fail", headers=admin)
    assert r.status_code == 200 and r.json()["state"] == "down"
    # the job without retries fails, the other is re-queued and waits: no GPU is reachable any more
    wait_for(lambda: get(once)["state"] == "failed", what="the job without retries to fail")
    wait_for(lambda: get(again)["state"] == "queued" and get(again)["wait_rounds"] > 0, what="a re-queue")
    assert get(again)["reason_code"] == "no-devices"  # the GPUs behind the link left the pool
    assert "5 gpu behind down link up:iobox0" in get(again)["reason"]  # and the reason says why
    done = {sl["id"]: sl for sl in client.get("/v1/slices?state=done", headers=alice).json()["slices"]}
    assert "link up:iobox0 dropped" in done[slices[again]]["detail"] and slices[disk] not in done
    assert get(disk)["state"] == "running" and get(disk)["slice"] == slices[disk]  # untouched
    devices = {d["id"]: d for d in client.get("/v1/devices", headers=alice).json()["devices"]}
    assert not devices["iobox0/gpu0"]["reachable"] and devices["iobox1/nvme0"]["reachable"]
    # none attached now, and none free either: nothing can use them (issue 21, reproduction 4)
    assert all(devices[f"iobox0/gpu{i}"]["state"] == "unreachable" for i in range(5))
    machines = {m["id"]: m for m in client.get("/v1/machines", headers=alice).json()["machines"]}
    assert machines["iobox0"]["state"] == "unreachable" and machines["iobox1"]["state"] != "unreachable"

    r = client.post("/v1/links/up:iobox0/repair", headers=admin)
    assert r.status_code == 200 and r.json()["state"] == "up"
    wait_for(lambda: get(again)["state"] == "running", what="the re-queued job to run again")
    assert get(again)["slice"] != slices[again] and get(again)["attempts"] == 2
    for j in (again, disk):
        client.post(f"/v1/jobs/{j}/cancel", headers=alice)


def test_every_method_a_path_has_is_named_in_405_and_unknown_query_parameters_are_refused(api: Client) -> None:
    """The routes live in several routers; a 405 still names every method of the path, not only
    those of the first route that matched, and a query parameter no route declares answers 422."""
    client, tok = api
    cases = [("PUT", "/v1/jobs", "GET, POST"), ("PATCH", "/v1/jobs/j-000000000000", "DELETE, GET"),
             ("GET", "/v1/devices/iobox0/gpu1/drain", "POST"), ("DELETE", "/v1/links", "GET")]
    for method, path, allow in cases:
        r = client.request(method, path, headers=h(tok["alice"]))
        assert (r.status_code, r.headers["allow"], r.json()["problems"]) == (405, allow, []), (method, path)
    r = client.get("/v1/slices?state=running&bogus=2&zzz=1", headers=h(tok["alice"]))
    assert r.status_code == 422
    assert r.json()["detail"] == "unknown query parameter 'bogus'; allowed: cursor, limit, state, steps"
    assert [p["field"] for p in r.json()["problems"]] == ["bogus", "zzz"]
    assert client.get("/healthz?x=1").json()["detail"] == "unknown query parameter 'x'; allowed: none"


def test_the_openapi_document_keeps_its_operations_in_order(api: Client) -> None:
    """Clients generated from /openapi.json name their calls by operationId: the routers keep them."""
    client, _ = api
    spec = client.get("/openapi.json").json()
    ops = [o["operationId"] for methods in spec["paths"].values() for o in methods.values()]
    assert ops == [
        "submit_job_v1_jobs_post", "list_jobs_v1_jobs_get", "submit_jobs_v1_job_batches_post",
        "get_job_v1_jobs__job_id__get",
        "delete_job_v1_jobs__job_id__delete", "cancel_job_v1_jobs__job_id__cancel_post",
        "job_logs_v1_jobs__job_id__logs_get",
        "job_events_v1_jobs__job_id__events_get", "hold_job_v1_jobs__job_id__hold_post",
        "release_job_v1_jobs__job_id__release_post", "requeue_job_v1_jobs__job_id__requeue_post",
        "list_slices_v1_slices_get",
        "get_slice_v1_slices__slice_id__get", "list_machines_v1_machines_get", "list_devices_v1_devices_get",
        "drain_device_v1_devices__device_id__drain_post", "fail_device_v1_devices__device_id__fail_post",
        "repair_device_v1_devices__device_id__repair_post", "list_links_v1_links_get",
        "fail_link_v1_links__link_id__fail_post", "repair_link_v1_links__link_id__repair_post",
        "list_tenants_v1_tenants_get", "get_tenant_v1_tenants__name__get", "set_tenant_v1_tenants__name__put",
        "create_token_v1_tokens_post", "list_tokens_v1_tokens_get", "revoke_token_v1_tokens__token_id__delete",
        "list_profiles_v1_profiles_get", "get_profile_v1_profiles__image__get", "pin_profile_v1_profiles__image__put",
        "unpin_profile_v1_profiles__image__delete",
        "get_history_v1_history_get", "healthz_healthz_get", "controller_v1_controller_get",
    ]


def test_metrics_can_be_opened_for_a_scraper(tmp_path: Path) -> None:
    """`metrics_public: true` serves /metrics without a token; the dashboard still needs one (a sign-in)."""
    svc = make_service(tmp_path, metrics_public=True)
    try:
        with TestClient(create_app(svc.jobs)) as client:
            assert client.get("/metrics").status_code == 200 and "disagg_queue_length" in client.get("/metrics").text
            first = client.get("/", follow_redirects=False)
            assert first.status_code == 303 and first.headers["location"].startswith("/login")
    finally:
        svc.close()
