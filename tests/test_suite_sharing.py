"""How the suite shares out between pytest-xdist's workers (tests/conftest.py): what goes to one worker, and
that every test has an id of its own, by which xdist sends it."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import xdist_scope


def test_a_files_tests_go_to_one_worker_and_so_do_all_slurm_tests() -> None:
    a = "tests/control/test_chaos.py::test_the_soak_did_what_it_was_told"
    b = "tests/control/test_chaos.py::test_an_invariant_of_the_soak[lost]"
    assert xdist_scope(a) == xdist_scope(b) == "tests/control/test_chaos.py"
    assert xdist_scope("tests/control/test_control_fuzz.py::TestApiWorkflows::runTest") == \
        xdist_scope("tests/control/test_control_fuzz.py::test_api_answers_within_its_schema[GET /v1/jobs]")
    assert xdist_scope("tests/slurm/test_slurm_engine.py::test_x") == xdist_scope(
        "tests/slurm/test_slurm_crash.py::test_y[attaching]") == "tests/slurm"
    assert xdist_scope("tests/test_cli.py::test_x") != xdist_scope("tests/test_policies.py::test_x")
    assert xdist_scope("tests/sim/test_slurm_like.py::t") == "tests/sim/test_slurm_like.py"  # (not a Slurm test)


def test_every_collected_test_has_an_id_of_its_own(request: pytest.FixtureRequest) -> None:
    """Schemathesis's tests, one per API operation, shared one id under pytest 9.2: xdist then ran one of 34.
    (Checked on what this session collected: with the whole suite, the fuzz tests are among it.)"""
    ids = Counter(item.nodeid for item in request.session.items)
    assert [i for i, n in ids.items() if n > 1] == []
    fuzz = "tests/control/test_control_fuzz.py::test_api_answers_within_its_schema"
    each = [i for i in ids if i.startswith(fuzz)]
    if each:
        assert len(each) > 20 and f"{fuzz}[GET /v1/jobs]" in each
