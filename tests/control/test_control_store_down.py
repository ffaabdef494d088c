"""A store that stops answering: the API says 503 with Retry-After (the request was fine; the database
was not there), changes nothing, and answers again once the database is back — never a 500."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from control_helpers import make_service
from fastapi.testclient import TestClient

from disagg.api.app import create_app
from disagg.api.errors import STORE_RETRY_AFTER_S
from disagg.store.pgtemp import TempPostgres, find_bin

pytestmark = pytest.mark.postgres

JOB = {"name": "j", "command": ["true"], "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0}}


def _answers(client: TestClient, method: str, path: str, token: str, json: object = None) -> httpx.Response:
    return client.request(method, path, headers={"Authorization": f"Bearer {token}"}, json=json)


def test_a_database_that_goes_down_is_a_503_with_retry_after_and_then_comes_back(tmp_path: Path) -> None:
    if find_bin() is None:
        pytest.skip("PostgreSQL is not installed (scripts/test.sh installs it as root)")
    with TempPostgres() as server:
        svc = make_service(tmp_path, db=server.create_database("down"))
        try:
            token = svc.store.create_token("alice")
            with TestClient(create_app(svc.jobs), raise_server_exceptions=False) as client:
                assert _answers(client, "POST", "/v1/jobs", token, JOB).status_code == 201
                server.halt()                                     # the database crashes
                for method, path, body in (("GET", "/v1/jobs", None), ("POST", "/v1/jobs", JOB),
                                           ("GET", "/metrics", None), ("GET", "/v1/slices", None),
                                           ("GET", "/redfish/v1/CompositionService/ResourceBlocks", None)):
                    r = _answers(client, method, path, token, body)
                    assert r.status_code == 503, (method, path, r.status_code, r.text)
                    assert r.headers["Retry-After"] == str(STORE_RETRY_AFTER_S)
                    body = r.json()
                    said = body["error"]["message"] if path.startswith("/redfish") else body["detail"]
                    assert "the store did not answer" in said, r.text
                    if path.startswith("/redfish"):   # Redfish's own error body, with the Base registry's id
                        assert body["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith(
                            ".ServiceTemporarilyUnavailable"), r.text
                server.resume()                                   # and comes back on the same port
                end = time.monotonic() + 20
                while (r := _answers(client, "GET", "/v1/jobs", token)).status_code != 200:
                    assert r.status_code == 503 and time.monotonic() < end, (r.status_code, r.text)
                    time.sleep(0.2)
                assert [j["name"] for j in r.json()["jobs"]] == ["j"]   # the refused submission wrote nothing
        finally:
            svc.close()
