"""POST /v1/job-batches: several jobs stored together or not at all, bounded like single submissions
(the tenant's rate, burst and queue bound count each job), an Idempotency-Key over the whole batch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from control_helpers import body, make_service, wait_for
from fastapi.testclient import TestClient

from disagg.api import create_app
from disagg.control.service import Service
from disagg.model.jobs import MAX_BATCH
from disagg.store import DuplicateKey, new_job_row

Client = tuple[TestClient, dict[str, str]]


def h(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def _jobs(client: TestClient, token: str) -> list[dict[str, object]]:
    return list(client.get("/v1/jobs?limit=500", headers=h(token)).json()["jobs"])


def test_a_batch_is_stored_in_order_and_every_job_runs(api: Client) -> None:
    client, tok = api
    sent = [body(f"sweep-{i}", ["sh", "-c", f"echo {i}"], gpu=i % 2) for i in range(5)]
    r = client.post("/v1/job-batches", headers=h(tok["alice"]), json={"jobs": sent})
    assert r.status_code == 201, r.text
    got = r.json()["jobs"]
    assert [j["name"] for j in got] == [f"sweep-{i}" for i in range(5)]
    assert len({j["id"] for j in got}) == 5 and all(j["state"] == "queued" and j["tenant"] == "alice" for j in got)

    def ended() -> bool:
        return all(client.get(f"/v1/jobs/{j['id']}", headers=h(tok["alice"])).json()["state"] == "completed"
                   for j in got)

    wait_for(ended, 60, "the batch's jobs to complete")
    for i, j in enumerate(got):
        assert client.get(f"/v1/jobs/{j['id']}/logs", headers=h(tok["alice"])).json()["logs"] == f"{i}\n"
    assert _jobs(client, tok["bob"]) == []


def test_one_bad_job_refuses_the_whole_batch_and_names_it(api: Client) -> None:
    client, tok = api
    never = client.post("/v1/job-batches", headers=h(tok["alice"]),
                        json={"jobs": [body("a", gpu=0), body("b", gpu=9), body("c", gpu=0)]})
    assert never.status_code == 422, never.text
    assert never.json()["problems"][0]["field"] == "jobs[1].tasks" and "never fit" in never.json()["detail"]
    bad = client.post("/v1/job-batches", headers=h(tok["alice"]),
                      json={"jobs": [body("a", gpu=0), {**body("b"), "command": []}]})
    assert bad.status_code == 422
    assert any("jobs" in p["field"] and "1" in p["field"] and "command" in p["field"]
               for p in bad.json()["problems"]), bad.json()
    for payload in ({"jobs": []}, {"jobs": [body(f"j{i}", gpu=0) for i in range(MAX_BATCH + 1)]}, {"job": [body()]}):
        r = client.post("/v1/job-batches", headers=h(tok["alice"]), json=payload)
        assert r.status_code == 422 and r.json()["problems"][0]["field"].startswith("job"), r.text
    assert _jobs(client, tok["alice"]) == []


def test_an_idempotency_key_covers_the_whole_batch(api: Client) -> None:
    client, tok = api
    sent = {"jobs": [body("a", gpu=0, command=["sleep", "30"]), body("b", gpu=0, command=["sleep", "30"])]}
    first = client.post("/v1/job-batches", headers=h(tok["alice"], **{"Idempotency-Key": "k-1"}), json=sent)
    again = client.post("/v1/job-batches", headers=h(tok["alice"], **{"Idempotency-Key": "k-1"}), json=sent)
    assert first.status_code == 201 and again.status_code == 201, again.text
    assert [j["id"] for j in again.json()["jobs"]] == [j["id"] for j in first.json()["jobs"]]
    for other in ({"jobs": sent["jobs"][:1]}, {"jobs": [*sent["jobs"], body("c", gpu=0)]},
                  {"jobs": [sent["jobs"][0], body("b2", gpu=0)]}):
        r = client.post("/v1/job-batches", headers=h(tok["alice"], **{"Idempotency-Key": "k-1"}), json=other)
        assert r.status_code == 409 and "k-1" in r.json()["detail"], r.text
    single = client.post("/v1/jobs", headers=h(tok["alice"], **{"Idempotency-Key": "k-1"}), json=body(gpu=0))
    assert single.status_code == 201 and single.json()["id"] not in {j["id"] for j in first.json()["jobs"]}
    bobs = client.post("/v1/job-batches", headers=h(tok["bob"], **{"Idempotency-Key": "k-1"}), json=sent)
    assert bobs.status_code == 201  # keys are per tenant
    assert len(_jobs(client, tok["alice"])) == 3


@pytest.fixture
def bounded(tmp_path: Path) -> Iterator[tuple[Service, TestClient, dict[str, str]]]:
    """No loop (jobs stay queued); alice may queue 5 jobs, submit 3 at once, then 0.5 a second."""
    svc = make_service(tmp_path, max_queued_per_tenant=5, submit_rate_per_tenant=0.5, rate_burst_per_tenant=3)
    try:
        tokens = {"alice": svc.store.create_token("alice"), "bob": svc.store.create_token("bob")}
        with TestClient(create_app(svc.jobs)) as client:
            yield svc, client, tokens
    finally:
        svc.close()


def test_a_batch_counts_each_job_against_the_rate_the_burst_and_the_queue(
        bounded: tuple[Service, TestClient, dict[str, str]]) -> None:
    svc, client, tok = bounded
    jobs = [body(f"j{i}", gpu=0) for i in range(4)]
    r = client.post("/v1/job-batches", headers=h(tok["alice"]), json={"jobs": jobs})
    assert r.status_code == 422 and "rate_burst_per_tenant" in r.json()["detail"]  # could never pass
    assert r.json()["problems"][0]["field"] == "jobs"
    assert client.post("/v1/job-batches", headers=h(tok["alice"]), json={"jobs": jobs[:3]}).status_code == 201
    r = client.post("/v1/job-batches", headers=h(tok["alice"]), json={"jobs": jobs[:1]})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1 and "submit_rate_per_tenant" in r.text
    client.app.state.submit_buckets.rate = 0  # type: ignore[attr-defined]  # the queue bound alone
    r = client.post("/v1/job-batches", headers=h(tok["alice"]), json={"jobs": jobs[:3]})
    assert r.status_code == 429 and "max_queued_per_tenant" in r.text and "batch of 3" in r.text
    assert len(svc.store.job_summaries()) == 3  # nothing of the refused batch was stored
    assert client.post("/v1/job-batches", headers=h(tok["alice"]), json={"jobs": jobs[:2]}).status_code == 201
    assert client.post("/v1/job-batches", headers=h(tok["bob"]), json={"jobs": jobs[:3]}).status_code == 201
    assert len(svc.store.job_summaries()) == 8


def test_rows_inserted_together_are_stored_together_or_not_at_all(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    try:
        writer = svc.store.submissions()
        clash = [new_job_row("alice", body(f"r{i}"), "same-key", "d", 0.0) for i in range(2)]
        fine = [new_job_row("alice", body(f"f{i}"), None, None, 0.0) for i in range(3)]
        refused, stored = writer.insert_all(clash), writer.insert_all(fine)
        with pytest.raises(DuplicateKey):
            refused.result(timeout=30)
        stored.result(timeout=30)
        writer.close()
        assert sorted(j.id for j in svc.store.job_summaries()) == sorted(r["id"] for r in fine)
    finally:
        svc.close()
