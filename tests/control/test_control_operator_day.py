"""An operator's first day (issue 25), against a real controller: one request model for the API and the
spec file, errors that list what is allowed, a clear 400 for a body that is not JSON, graceful cancel,
hold and release, allocation per machine and pool, true job times, and the server's log lines."""

from __future__ import annotations

import pytest
from control_helpers import body
from fastapi.testclient import TestClient

from disagg.api import schemas as S
from disagg.model import SpecError
from disagg.model.spec import TasksSpec, parse_jobs

Client = tuple[TestClient, dict[str, str]]


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_api_and_the_spec_file_share_one_tasks_model_and_its_words(api: Client) -> None:
    client, tok = api
    assert issubclass(S.TasksIn, TasksSpec) and S.TasksIn.model_fields.keys() == TasksSpec.model_fields.keys()
    allowed = ", ".join(TasksSpec.model_fields)
    bad = body("typo")
    bad["tasks"]["gpus"] = 1
    r = client.post("/v1/jobs", headers=h(tok["alice"]), json=bad)
    assert r.status_code == 422
    assert r.json()["problems"] == [{"field": "tasks.gpus", "message": f"unknown field 'gpus' (allowed: {allowed})"}]
    with pytest.raises(SpecError, match=rf"tasks.gpus: unknown field 'gpus' \(allowed: {allowed}\)"):
        parse_jobs({"jobs": [{"name": "typo", "tasks": {"gpus": 1}}]})
    # the same bounds: what one refuses, the other does
    for tasks in ({"count": 10_001}, {"gpu": 4097}, {"cpus": 0}, {"gpu_model": "no spaces"}):
        r = client.post("/v1/jobs", headers=h(tok["alice"]), json={**body("b"), "tasks": tasks})
        assert r.status_code == 422, tasks
        with pytest.raises(SpecError):
            parse_jobs({"jobs": [{"name": "b", "tasks": tasks}]})


def test_a_body_that_is_not_json_is_a_400_that_says_so(api: Client) -> None:
    client, tok = api
    r = client.post("/v1/jobs", headers={**h(tok["alice"]), "content-type": "application/json"}, content=b"{nope")
    assert r.status_code == 400
    assert r.json()["detail"].startswith("the body is not valid JSON: ") and r.json()["problems"][0]["field"] == "body"
