"""Small helpers for the controller's tests: waiting for a state, reading jobs, job bodies."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from disagg.control.service import Service, Settings, open_service
from disagg.store import job_dict
from disagg.store.models import JobRow
from disagg.store.pgtemp import free_port

FAST = 0.002  # the emulated testbed's latencies, scaled down for tests


def make_service(tmp_path: Path, db: str | None = None, cluster: str | None = None, scale: float = FAST,
                 **kw: object) -> Service:
    settings = Settings(db=db or f"sqlite:///{tmp_path / 'disagg.db'}", cluster=cluster,
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
    j, created = svc.controller.submit(tenant, body(**kw))
    assert created
    return str(j["id"])


def wait_state(svc: Service, job_id: str, states: tuple[str, ...], timeout: float = 20.0) -> dict[str, Any]:
    wait_for(lambda: job(svc, job_id)["state"] in states, timeout, f"job {job_id} to be {'/'.join(states)}")
    return job(svc, job_id)


class Server:
    """`disagg serve` in a forked child (the test process has imported everything: a fast start)."""

    def __init__(self, tmp: Path, db: str, options: list[str]) -> None:
        self.tmp, self.db, self.options = tmp, db, options
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.pid = 0

    def start(self) -> None:
        """Fork a child that runs `disagg serve` (the parent has imported everything: a fast start)."""
        argv = ["disagg", "serve", "--db", self.db, "--port", str(self.port), "--state-dir", str(self.tmp / "state"),
                *self.options]
        pid = os.fork()
        if pid == 0:  # the child: become the server, never return into pytest
            try:
                os.setsid()
                fd = os.open(self.tmp / "server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - pytest's capture is not ours
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                sys.argv = argv
                from disagg.cli import main

                main()
            finally:
                os._exit(0)
        self.pid = pid

    def ready(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
            assert done == 0, (self.tmp / "server.log").read_text()[-3000:]
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.03)
        raise AssertionError("the server did not come up")

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)  # no cleanup of any kind
        os.waitpid(self.pid, 0)
