"""How `disagg serve` ends, as a supervisor sees it: the real command in a process of its own.

- SIGTERM (systemd's stop, docker's, Kubernetes'): uvicorn put back the default handler and raised the
  signal again once it had shut down, which killed the process there. Its shutdown never ran: the loop
  process died by PDEATHSIG's SIGKILL in the middle of its round, the lease was never given up (a standby
  waited for it to lapse), nothing was said of the jobs left running, and the exit was "killed by SIGTERM".
- The state directory's disk full (the store elsewhere, with room): every round failed, /healthz said `ok`,
  and the log took four tracebacks a second. Now /healthz names that filesystem, submissions get 503, and
  the log says the failure once, then counts it every 30 s.
- The store's disk full: the leader cannot renew its lease and steps down. It said only "no renewal for
  3.0 s" and ended by the same signal instead of its exit code 3; a start on the full disk was a traceback
  ("its error is in the log"). Both now say what the store said and what is free, and the start after
  the disk has room adopts the job that ran on meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from control_helpers import SAME_USER, wait_for

from disagg.store.pgtemp import free_port


class Serve:
    """`python -m disagg.cli serve` with the store and the state directory in `root`."""

    def __init__(self, root: Path, jobs: Path) -> None:
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "disagg.cli", "serve", "--port", str(self.port),
                     "--db", f"sqlite:///{root / 'd.db'}", "--state-dir", str(root / "state"),
                     "--latency-scale", "0.002", "--tick-s", "0.02",
                     *(["--allow-same-user"] if SAME_USER else [])]
        self.env = {**os.environ, "DISAGG_JOBS_DIR": str(jobs), "DISAGG_ALLOW_JOBS_ON_STORE_DISK": "true",
                    "DISAGG_MIN_FREE_DISK_MB": "1"}
        self.log = root.parent / f"serve-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=out, env=self.env, start_new_session=True)
        return self.proc

    def ready(self) -> None:
        def up() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
            return False
        wait_for(up, timeout=60, what="disagg serve to answer")

    def token(self) -> str:
        return (self.root / "state" / "admin-token").read_text().strip()

    def submit(self, command: list[str]) -> str:
        r = httpx.post(self.url + "/v1/jobs", headers={"Authorization": f"Bearer {self.token()}"}, timeout=10,
                       json={"name": "long", "command": command, "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0}})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def job(self, job_id: str) -> dict[str, object]:
        r = httpx.get(f"{self.url}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {self.token()}"}, timeout=10)
        out: dict[str, object] = r.json()
        return out

    def adopts_and_cancels(self, job_id: str) -> None:
        """Start again: the job that ran on meanwhile is adopted as running; then cancel it, and see it end."""
        self.start()
        self.ready()
        assert self.job(job_id)["state"] == "running"
        r = httpx.post(f"{self.url}/v1/jobs/{job_id}/cancel", headers={"Authorization": f"Bearer {self.token()}"})
        assert r.status_code == 202
        wait_for(lambda: self.job(job_id)["state"] == "cancelled", timeout=30, what="the job to be cancelled")

    def lease_released(self) -> bool:
        with contextlib.closing(sqlite3.connect(self.root / "d.db")) as db:
            return bool(db.execute("SELECT released FROM controller_lease WHERE id = 1").fetchone()[0])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def jobs_dir() -> Iterator[Path]:
    jobs = Path(tempfile.mkdtemp(prefix="disagg-stop-jobs-", dir="/var/tmp"))
    jobs.chmod(0o755)
    yield jobs
    shutil.rmtree(jobs, ignore_errors=True)


def _runner_alive(jobs: Path) -> bool:
    """Whether a `sleep` of the test's jobs still runs (its working directory is under `jobs`)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(jobs)) and \
                    Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
                return True
    return False


def test_sigterm_stops_the_server_gracefully_and_leaves_the_jobs_running(tmp_path: Path, jobs_dir: Path) -> None:
    root = tmp_path / "one"
    root.mkdir()
    serve = Serve(root, jobs_dir)
    proc = serve.start()
    try:
        serve.ready()
        job = serve.submit(["sleep", "60"])
        wait_for(lambda: serve.job(job)["state"] == "running", timeout=60, what="the job to run")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, serve.log.read_text()[-3000:]  # not -15: killed by the signal
        log = serve.log.read_text()
        assert "stopping: 1 job composing or running left running, by design" in log
        assert serve.lease_released()  # given up: a standby would take over at once
        assert _runner_alive(jobs_dir)
        serve.adopts_and_cancels(job)  # the next start adopts it
    finally:
        serve.kill()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs (root only: mount)."""
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 2**20)
    return filler


def test_a_full_store_disk_stops_the_leader_with_its_reason_and_the_start_after_room_adopts(
        small_disk: Path, jobs_dir: Path) -> None:
    serve = Serve(small_disk, jobs_dir)
    proc = serve.start()
    try:
        serve.ready()
        job = serve.submit(["sleep", "120"])
        wait_for(lambda: serve.job(job)["state"] == "running", timeout=60, what="the job to run")
        filler = _fill(small_disk)
        assert proc.wait(timeout=60) == 3, serve.log.read_text()[-3000:]  # stepped down: the supervisor restarts
        log = serve.log.read_text()
        assert "steps down: the lease of epoch 1 lapsed: no renewal for 3.0 s (the store: database or disk is " \
               f"full (0 MiB free on {small_disk}))" in log
        assert _runner_alive(jobs_dir)  # the job runs on meanwhile
        again = serve.start()  # the supervisor's restart, the disk still full
        assert again.wait(timeout=60) == 1
        said = serve.log.read_text()[len(log):]
        assert f"error: cannot take the lease of the store at 'sqlite:///{small_disk / 'd.db'}': database or " \
               f"disk is full (0 MiB free on {small_disk})" in said and "Traceback" not in said, said
        filler.unlink()  # room again: the next restart adopts the job
        serve.adopts_and_cancels(job)
    finally:
        serve.kill()


def test_a_full_state_directory_degrades_health_refuses_submissions_and_the_log_says_it_once(
        tmp_path: Path, jobs_dir: Path) -> None:
    """The store on a disk with room, the state directory on a full one: every round failed (the loop could
    write neither the fabric's records, nor the mark, nor what it publishes), four tracebacks a second in
    the log, while /healthz said `ok` and submissions were taken, to wait in `composing`."""
    root = tmp_path / "one"
    root.mkdir()
    state = root / "state"
    state.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(state)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    serve = Serve(root, jobs_dir)
    serve.start()
    try:
        serve.ready()
        job = serve.submit(["true"])
        wait_for(lambda: serve.job(job)["state"] == "completed", timeout=60, what="a job before the disk fills")
        filler = _fill(state)
        wait_for(lambda: httpx.get(serve.url + "/healthz", timeout=5).json()["status"] == "degraded", timeout=10,
                 what="/healthz to say degraded")
        health = httpx.get(serve.url + "/healthz", timeout=5).json()
        assert f"low disk: 0 MiB free on the state directory's filesystem ({state})" in health["cause"], health
        r = httpx.post(serve.url + "/v1/jobs", headers={"Authorization": f"Bearer {serve.token()}"}, timeout=10,
                       json={"name": "late", "command": ["true"], "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0}})
        assert r.status_code == 503 and "state directory's filesystem" in r.json()["detail"], r.text
        time.sleep(5)  # some twenty rounds, each failing to write there
        log = serve.log.read_text()
        assert log.count("controller round failed") == 1 and log.count("Traceback") <= 2, log[-3000:]
        filler.unlink()
        wait_for(lambda: "controller rounds succeed again" in serve.log.read_text(), timeout=30,
                 what="the rounds to succeed again")
        again = serve.submit(["true"])
        wait_for(lambda: serve.job(again)["state"] == "completed", timeout=60, what="a job once there is room")
    finally:
        serve.kill()
        subprocess.run(["umount", "-l", str(state)], check=False)


def test_an_api_judges_only_its_own_loops_silence() -> None:
    """A leading loop process publishes after every round; its API says `degraded` when that stops for
    STALE_S. What another replica's loop published into the shared state directory, or a loop that never
    published (a standby's), says nothing of this one."""
    from disagg.control.split import STALE_S, LoopLink

    link = LoopLink(-1, Path("/nonexistent/loop-status.json"), loop_pid=4242)
    now = 1_000_000.0
    assert link.silence({"pid": 4242, "at": now - 1}, now) is None
    said = link.silence({"pid": 4242, "at": now - STALE_S - 5}, now)
    assert said is not None and said.startswith(f"the loop process 4242 has published nothing for {STALE_S + 5:.0f} s")
    assert link.silence({"pid": 777, "at": now - 3600}, now) is None  # another replica's loop
    assert link.silence({}, now) is None
    assert LoopLink(-1, Path("/x"), loop_pid=0).silence({"pid": 0, "at": 0.0}, now) is None
