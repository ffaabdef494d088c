"""Fixtures for the controller's tests: stores on SQLite and on a real PostgreSQL, services, API clients.

PostgreSQL is Debian's server, started once per session in a throw-away directory (see
`disagg.store.pgtemp`); each test gets a fresh database. Where the server binaries are missing (the
README's test command installs them as root), the PostgreSQL variants skip with the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_helpers import make_service
from fastapi.testclient import TestClient

from disagg.api import create_app
from disagg.control.service import Service
from disagg.store.pgtemp import TempPostgres, find_bin


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TempPostgres]:
    if find_bin() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; scripts/test.sh does it as root)")
    server = TempPostgres()
    try:
        server.start()
    except Exception as exc:
        server.stop()
        pytest.skip(f"could not start a throw-away PostgreSQL: {exc}")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'disagg.db'}"
    server: TempPostgres = request.getfixturevalue("pg_server")
    return server.create_database("t_" + uuid.uuid4().hex[:10])


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    """A running controller on SQLite, the FlowOS-RM testbed, fast emulated latencies."""
    svc = make_service(tmp_path)
    svc.controller.start()
    yield svc
    svc.close()


@pytest.fixture
def api(service: Service) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """An API client and tokens: `admin`, `alice`, `bob`."""
    tokens = {
        "admin": service.store.create_token("admin", admin=True),
        "alice": service.store.create_token("alice"),
        "bob": service.store.create_token("bob"),
    }
    with TestClient(create_app(service.jobs)) as client:
        yield client, tokens


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
