"""A browser meets the dashboard's errors as pages: an unknown or ambiguous job, a cross-site form, a
bad filter, an unknown page each answer an HTML page in the dashboard's layout with the API's status
and message and a link back; the /v1 API keeps its JSON errors for the same faults."""

from __future__ import annotations

import pytest
from control_helpers import body
from fastapi.testclient import TestClient

Client = tuple[TestClient, dict[str, str]]


def h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def is_error_page(r: object, status: int, *says: str) -> bool:
    """An HTML page of the dashboard (its header, nav and a link back) with `status` and every `says`."""
    text: str = r.text  # type: ignore[attr-defined]
    return (r.status_code == status and r.headers["content-type"].startswith("text/html")  # type: ignore[attr-defined]
            and '<nav>' in text and 'href="/ui/fabric"' in text and 'id="back"' in text
            and all(s in text for s in says))


@pytest.fixture
def signed_in(api: Client) -> Client:
    client, tok = api
    client.post("/login", data={"token": tok["alice"]})
    return api


def test_an_unknown_job_is_a_page_with_the_message_and_a_link_back(signed_in: Client) -> None:
    client, _ = signed_in
    r = client.get("/ui/jobs/j-nope")
    assert is_error_page(r, 404, "Not found", "no job &#39;j-nope&#39;", 'href="/ui/queue"', "alice"), r.text
    assert "data-refresh" not in r.text  # an error page does not reload itself
    r = client.get("/ui/jobs/j-nope/log")
    assert is_error_page(r, 404, "no job")


def test_an_ambiguous_job_id_lists_the_matches_on_the_page(signed_in: Client) -> None:
    client, tok = signed_in
    ids = [client.post("/v1/jobs", headers=h(tok["alice"]), json=body(f"a{i}", gpu=0)).json()["id"] for i in range(2)]
    r = client.get("/ui/jobs/j-")
    assert is_error_page(r, 409, "ambiguous", *(f"matches {i}" for i in ids)), r.text


def test_a_cross_site_form_post_is_a_403_page(signed_in: Client) -> None:
    client, tok = signed_in
    jid = client.post("/v1/jobs", headers=h(tok["alice"]), json=body("x", gpu=0)).json()["id"]
    r = client.post(f"/ui/jobs/{jid}/cancel", headers={"Origin": "https://evil.example"}, follow_redirects=False)
    assert is_error_page(r, 403, "Not allowed", "cross-site form post refused")


def test_a_bad_filter_is_a_422_page_naming_the_field(signed_in: Client) -> None:
    client, _ = signed_in
    r = client.get("/ui/queue?state=bogus")
    assert is_error_page(r, 422, "Bad input", "state: Input should be"), r.text
    r = client.get("/ui/history?window=7y")
    assert is_error_page(r, 422, "window: ")


def test_an_unknown_page_is_a_404_page_and_without_a_session_it_leads_to_sign_in(api: Client) -> None:
    client, _ = api
    r = client.get("/ui/nowhere")
    assert is_error_page(r, 404, 'href="/login"', "Sign in") and "Sign out" not in r.text
    r = client.get("/ui/jobs/<script>alert(1)</script>", follow_redirects=False)
    assert "<script>alert" not in r.text  # whatever comes back, the typed text is never markup


def test_the_api_keeps_its_json_errors(api: Client) -> None:
    client, tok = api
    alice = h(tok["alice"])
    for path, status in (("/v1/jobs/j-nope", 404), ("/v1/nowhere", 404), ("/v1/jobs?state=bogus", 422)):
        r = client.get(path, headers=alice)
        assert r.status_code == status and r.headers["content-type"] == "application/json", path
        assert r.json()["detail"]
    r = client.put("/ui/queue")  # 405 on a page: a page too, with the methods the path has
    assert is_error_page(r, 405) and r.headers["allow"] == "GET"
