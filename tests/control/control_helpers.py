"""Small helpers for the controller's tests: waiting for a state, reading jobs, job bodies."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
from tests.attacks import SHARED_ROOT
from tests.server_files import admin_token  # noqa: F401 - re-exported for the controller tests

from disagg.bench.crash import ForkedServer
from disagg.cli.serve import serve_main
from disagg.control.config import Config
from disagg.control.service import Service, open_service
from disagg.store import job_dict
from disagg.store.models import JobRow

FAST = 0.002  # the emulated testbed's latencies, scaled down for tests
#: Where the tests' task cgroups go (the session removes them at its end: tests/conftest.py).
TEST_CGROUP = os.environ["DISAGG_CGROUP_PARENT"]  # (set for the session by tests/conftest.py)
#: Not root: jobs can only run as the tests' own user.
SAME_USER = os.geteuid() != 0


class Server(ForkedServer):
    """The tests' server: `disagg serve` in a forked child, started as `disagg bench crash` starts it."""

    def __init__(self, root: Path, db: str, options: list[str]) -> None:
        super().__init__(root, db, [*options, "--allow-same-user"] if SAME_USER else options, serve_main)


def make_service(tmp_path: Path, db: str | None = None, cluster: str | None = None, scale: float = FAST,
                 **kw: object) -> Service:
    kw = {"cgroup_parent": TEST_CGROUP, "allow_same_user": SAME_USER,
          "unix_user_prefix": os.environ.get("DISAGG_UNIX_USER_PREFIX"), "job_shared_dirs": [str(SHARED_ROOT)],
          "allow_jobs_on_store_disk": True, **kw}
    settings = Config(db=db or f"sqlite:///{tmp_path / 'disagg.db'}", cluster=cluster,
                        state_dir=str(tmp_path / "state"), latency_scale=scale, tick_s=0.02, round_gap_s=0.02, **kw)  # type: ignore[arg-type]
    return open_service(settings)


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    """Poll until `predicate()` holds; fail with `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def job(svc: Service, job_id: str) -> dict[str, Any]:
    with svc.store.read() as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        return job_dict(row)


def body(name: str = "train", command: list[str] | None = None, **tasks: Any) -> dict[str, Any]:
    t = {"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 1, "nvme": 0, "fpga": 0, "memory": 0}
    t.update(tasks)
    return {"name": name, "image": "rodinia/nw", "command": command or ["sh", "-c", "echo hi"],
            "tasks": t, "slo_s": 600.0, "importance": 1.0, "max_retries": 2}


def submit(svc: Service, tenant: str = "t", **kw: Any) -> str:
    j, created = svc.jobs.submit(tenant, body(**kw))
    assert created
    return str(j["id"])


def wait_state(svc: Service, job_id: str, states: tuple[str, ...], timeout: float = 20.0) -> dict[str, Any]:
    wait_for(lambda: job(svc, job_id)["state"] in states, timeout, f"job {job_id} to be {'/'.join(states)}")
    return job(svc, job_id)


@dataclass
class Tenants:
    """A running `disagg serve` and its tenants' tokens: each call made as the tenant it names (the
    attack tests' side of the API)."""

    server: Server
    root: Path
    tokens: dict[str, str]
    #: A job's task unless a call says otherwise, and how long one request may take.
    TASK: ClassVar[dict[str, Any]] = {"count": 1, "cpus": 1.0, "memory_gb": 1.0}
    TIMEOUT_S: ClassVar[float] = 10.0
    WAIT_S: ClassVar[float] = 30.0

    def h(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def submit(self, who: str, command: list[str], tasks: dict[str, Any] | None = None, **extra: Any) -> str:
        body = {"name": "attack", "command": command, "tasks": {**self.TASK, **(tasks or {})}, "max_retries": 0,
                **extra}
        r = httpx.post(self.server.url + "/v1/jobs", headers=self.h(who), json=body, timeout=self.TIMEOUT_S)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def job(self, who: str, job_id: str) -> dict[str, Any]:
        r = httpx.get(f"{self.server.url}/v1/jobs/{job_id}", headers=self.h(who), timeout=self.TIMEOUT_S)
        return dict(r.json())

    def logs(self, who: str, job_id: str) -> str:
        r = httpx.get(f"{self.server.url}/v1/jobs/{job_id}/logs", headers=self.h(who), timeout=self.TIMEOUT_S)
        return str(r.json()["logs"])

    def wait(self, who: str, job_id: str, *states: str, timeout: float | None = None) -> dict[str, Any]:
        """The job once it is in one of `states`; on a time-out, the job and its log's end say why."""
        self.until(who, job_id, lambda: self.job(who, job_id)["state"] in states, timeout, "/".join(states))
        return self.job(who, job_id)

    def until(self, who: str, job_id: str, predicate: Callable[[], bool], timeout: float | None, what: str) -> None:
        try:
            wait_for(predicate, self.WAIT_S if timeout is None else timeout, f"{job_id} to be {what}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {self.job(who, job_id)}, logs {self.logs(who, job_id)[-2000:]!r}") from None
