"""Fuzz the REST API from its own OpenAPI document with Schemathesis: no 5xx, no answer off its schema,
no undocumented status code, no schema-violating request accepted, auth never ignored.

The controller's loop is not started here: fuzzed jobs are stored and validated but never run (the
fuzzer's commands are random strings).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from control_helpers import make_service
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from disagg.api import create_app

# Schemathesis needs the app when the module loads: one service, in a directory of its own. (Removed at
# exit too: under pytest-xdist every worker loads the module to collect it, and only one runs it.)
_DIR = Path(tempfile.mkdtemp(prefix="disagg-fuzz-"))
atexit.register(shutil.rmtree, _DIR, ignore_errors=True)
_SERVICE = make_service(_DIR)
_ADMIN = [_SERVICE.store.create_token("fuzz-admin", admin=True)]
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(_SERVICE.jobs))


_SEEN: Counter[tuple[str, int]] = Counter()
#: Refusals of schema-valid input: a job larger than the cluster, a cursor the API never gave (opaque),
#: a reserved tenant name, a tenant name that differs from a known one only in case or trailing punctuation.
UNSTATED = ("can never fit on this cluster", "not a cursor this API gave", "is reserved", "needs a quota of",
            "only in case or trailing")


def _never_fits(response: Any) -> bool:
    """Schema-valid but refused by a rule no static schema can state (UNSTATED): a job larger than the
    cluster (documented as a 422 with an example), a cursor this API never gave, a reserved tenant name, a
    tenant's borrow without a quota to add to. "Valid data is accepted" does not apply to these answers;
    every other check does."""
    return bool(response.status_code == 422 and any(why in response.text for why in UNSTATED))


@schema.auth(refresh_interval=None)  # asked every time: the token may have been revoked (below)
class AdminToken:
    """Schemathesis puts the admin token on the requests it means to be authorized (and only those)."""

    def get(self, case: schemathesis.Case, ctx: object) -> str:
        # the fuzzer is an admin: DELETE /v1/tokens/{id} may revoke its own token; it then gets a new one
        if _SERVICE.store.principal(_ADMIN[0]) is None:
            _ADMIN[0] = _SERVICE.store.create_token("fuzz-admin", admin=True)
        return _ADMIN[0]

    def set(self, case: schemathesis.Case, data: str, ctx: object) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@pytest.fixture(scope="module", autouse=True)
def _close_service() -> Iterator[None]:
    yield
    _SERVICE.close()
    shutil.rmtree(_DIR, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_answers_within_its_schema(case: schemathesis.Case) -> None:
    response = case.call()
    _SEEN[(case.method.upper(), response.status_code)] += 1
    if _never_fits(response):
        case.validate_response(response, excluded_checks=[positive_data_acceptance])
    else:
        case.validate_response(response)


def test_the_fuzzer_got_past_auth() -> None:
    """The fuzz above ran with a working token: jobs were created and lists were read."""
    if not _SEEN:
        pytest.skip("run together with test_api_answers_within_its_schema")
    assert _SEEN[("POST", 201)] > 0 and _SEEN[("GET", 200)] > 0, dict(_SEEN)
    assert not [k for k in _SEEN if k[1] >= 500]


# --- stateful: sequences of calls along the OpenAPI links (POST /v1/jobs → its id in the job's routes) ---
# Every built-in check, the stateful ones included: a job removed by DELETE must be gone from every
# route ("use after free"), a job a POST created must be there to GET ("resource availability").
# (the job routes only: the links are among them, and the other routes would take the steps)
def _forget_jobs() -> None:
    """Every job cancelled and removed, with its Idempotency-Key. A run of the state machine then starts
    from the same store whatever ran before it (the fuzz above, earlier runs): a key another run used
    would otherwise turn a 201 into a replay or a 409, the rules the machine may take next would differ
    between a run and its replay, and Hypothesis stops with FlakyStrategyDefinition (seen in CI)."""
    for job in _SERVICE.store.job_summaries():
        _SERVICE.store.cancel_job(job.id)
        _SERVICE.store.delete_jobs([job.id])


class ApiWorkflow(schema.include(path_regex=r"^/v1/jobs").as_state_machine()):  # type: ignore[misc]
    def setup(self) -> None:
        _forget_jobs()

    def validate_response(self, response: Any, case: schemathesis.Case, additional_checks: Any = None,
                          **kwargs: Any) -> None:
        _SEEN[(case.method.upper(), response.status_code)] += 1
        excluded = [positive_data_acceptance] if _never_fits(response) else []
        recorder = getattr(self, "recorder", None)
        case.validate_response(response, additional_checks=additional_checks, excluded_checks=excluded,
                               transport_kwargs=kwargs or None, **({"recorder": recorder} if recorder else {}))


TestApiWorkflows = ApiWorkflow.TestCase
TestApiWorkflows.settings = settings(max_examples=60, stateful_step_count=8, deadline=None, derandomize=True,
                                     suppress_health_check=list(HealthCheck))


def test_the_stateful_links_reach_every_job_route() -> None:
    """The links the stateful run follows exist: from the POST to each route that takes a job id."""
    links = schema.raw_schema["paths"]["/v1/jobs"]["post"]["responses"]["201"]["links"]
    assert {link["operationId"].split("_v1_")[0] for link in links.values()} == {
        "get_job", "cancel_job", "delete_job", "job_logs", "job_events", "hold_job", "release_job", "requeue_job"}


def test_the_stateful_run_followed_the_links() -> None:
    """The workflows above cancelled, and tried to remove, jobs they had created (not only unknown ids)."""
    if not _SEEN:
        pytest.skip("run together with TestApiWorkflows")
    assert _SEEN[("POST", 202)] > 0, dict(_SEEN)
    assert _SEEN[("DELETE", 409)] + _SEEN[("DELETE", 204)] > 0, dict(_SEEN)
