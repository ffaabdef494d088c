"""The tenants spec: weights, cohorts, quotas with borrowing, the Unix user; errors that name the field."""

from __future__ import annotations

import math

import pytest

from disagg.model import SpecError
from disagg.model.tenants import parse_tenants, tenant_name_problem

ISSUE_EXAMPLE = {"tenants": [
    {"name": "alice", "weight": 2, "cohort": "research",
     "quota": {"gpu": 8, "cpus": 64, "memory_gb": 512, "network_gbps": 40}, "borrow": {"gpu": 8}},
    {"name": "bob", "weight": 1, "cohort": "research", "quota": {"gpu": 4, "cpus": 32, "memory_gb": 256}},
]}


def test_the_issue_example_parses_with_limits_and_defaults() -> None:
    tenants = parse_tenants(ISSUE_EXAMPLE)
    alice, bob = tenants.get("alice"), tenants.get("bob")
    assert (alice.weight, alice.cohort, alice.limit("gpu"), alice.limit("cpus")) == (2.0, "research", 16.0, 64.0)
    assert bob.limit("gpu") == 4.0 and bob.limit("network_gbps") == math.inf and bob.limit("nvme") == math.inf
    carol = tenants.get("carol")  # not named: the defaults
    assert (carol.weight, carol.cohort, carol.limit("gpu")) == (1.0, None, math.inf)
    assert parse_tenants(ISSUE_EXAMPLE["tenants"]).get("alice") == alice  # the list alone is fine too


@pytest.mark.parametrize(("tenants", "match"), [
    ([{"name": "admin"}], r"tenants\[0\]\.name: .*'admin' is reserved"),
    ([{"name": "a\x1b[31m"}], r"tenants\[0\]\.name: .* is not allowed"),
    ([{"name": "a"}, {"name": "a"}], "the name 'a' is used more than once"),
    ([{"name": "a", "quota": {"gpus": 1}}], r"tenants\[0\]\.quota\.gpus: unknown field"),
    ([{"name": "a", "quota": {"gpu": -1}}], r"tenants\[0\]\.quota\.gpu: value -1 is not allowed"),
    ([{"name": "a", "weight": 0}], r"tenants\[0\]\.weight: value 0 is not allowed"),
    ([{"name": "a", "borrow": {"gpu": 2}}], r"tenants\[0\]\.borrow\.gpu: borrowing 2 needs a quota of gpu"),
    ([{"name": "a", "unix_user": "Root!"}], r"tenants\[0\]\.unix_user: .*not a Unix user name"),
    ([{"name": "a", "quota": {"gpu": True}}], r"tenants\[0\]\.quota\.gpu: "),
    ([{"name": "a", "quota": {"gpu": "8"}}], r"tenants\[0\]\.quota\.gpu: "),
    ([{"name": "a", "weight": "2"}], r"tenants\[0\]\.weight: "),
    ([{"name": "a", "quota": {"gpu": 1e308}, "borrow": {"gpu": 1e308}}], r"tenants\[0\]\.quota\.gpu: value 1e\+308"),
], ids=["reserved", "control-chars", "duplicate", "unknown-resource", "negative", "zero-weight",
        "borrow-without-quota", "bad-unix-user", "bool-for-a-number", "string-for-a-number", "string-weight",
        "a-limit-past-any-cluster"])
def test_bad_tenants_are_refused_naming_the_field(tenants: list[dict[str, object]], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_tenants({"tenants": tenants})


def test_tenant_names_that_mean_something_else_are_refused() -> None:
    assert tenant_name_problem("system") is not None and tenant_name_problem("team-a.1") is None
    assert tenant_name_problem("") is not None and tenant_name_problem("x" * 65) is not None
