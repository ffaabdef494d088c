"""Losing state is loud, and what is kept is bounded: a deleted WAL makes the restart refuse (and kill
nothing), a backup restores and resumes, retention removes what ended, a tenant's queue is bounded, a
job that cannot run as its user fails with the reason, task paths are absolute wherever the store is."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from control_helpers import FAST, SAME_USER, Server, admin_token, job, make_service, submit, wait_for, wait_state
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from disagg.api import create_app
from disagg.cli import app
from disagg.control.gc import collect
from disagg.engines.local import LocalEngine
from disagg.store import Store
from disagg.store.backup import restore_store

runner = CliRunner()
OPTIONS = ["--latency-scale", str(FAST), "--tick-s", "0.02", "--round-gap-s", "0.02"]


class Client:
    """A tenant's calls to a running server."""

    def __init__(self, server: Server, token: str) -> None:
        self.url = server.url
        self.h = {"Authorization": f"Bearer {token}"}

    def submit(self, command: list[str], **tasks: Any) -> str:
        body = {"name": "r", "command": command, "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0, **tasks}}
        r = httpx.post(self.url + "/v1/jobs", headers=self.h, json=body, timeout=10)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def get(self, job_id: str) -> httpx.Response:
        return httpx.get(f"{self.url}/v1/jobs/{job_id}", headers=self.h, timeout=10)

    def wait(self, job_id: str, state: str = "completed") -> None:
        wait_for(lambda: self.get(job_id).json()["state"] == state, what=f"{job_id} to be {state}")


@contextmanager
def running(server: Server) -> Iterator[Server]:
    """The server started and answering; killed at the end, whatever happened."""
    server.start()
    try:
        server.ready()
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            server.kill()


def refused(server: Server) -> str:
    """Start the server, which must refuse to start; what it said."""
    server.start()
    try:
        server.ready()
    except RuntimeError as exc:  # it exited (and was reaped) with its message
        return str(exc)
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        server.kill()
    raise AssertionError("the server started")


def _a_long_job(server: Server, root: Path) -> tuple[Client, str, str, int]:
    """An admin's client, and a `sleep 60` of it running: (the client, the job, its slice, its runner's pid)."""
    c = Client(server, admin_token(root))
    long = c.submit(["sleep", "60"])
    c.wait(long, "running")
    slice_id = c.get(long).json()["slice"]
    return c, long, slice_id, _runner_pid(root, slice_id)


def _cancel(server: Server, c: Client, job_id: str, pid: int) -> None:
    """Cancel the job and see its runner stop."""
    assert httpx.post(f"{server.url}/v1/jobs/{job_id}/cancel", headers=c.h, timeout=10).status_code == 202
    wait_for(lambda: not _alive(pid), what="the cancelled job to stop")


def _runner_pid(root: Path, slice_id: str) -> int:
    """The pid of the job's runner, once it has claimed the job (a moment after the job shows running)."""
    started = root / "state" / "tasks" / slice_id / "started"
    wait_for(lambda: started.exists() and '"pid"' in started.read_text(), what="the runner to claim the job")
    return int(json.loads(started.read_text())["pid"])


def test_a_deleted_wal_makes_the_restart_refuse_and_kill_nothing(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'd.db'}"
    server = Server(tmp_path, db, OPTIONS)
    with running(server):
        c = Client(server, admin_token(tmp_path))
        done = [c.submit(["true"]) for _ in range(5)]
        for j in done:
            c.wait(j)
        long = c.submit(["sleep", "60"])
        c.wait(long, "running")
        pid = _runner_pid(tmp_path, c.get(long).json()["slice"])
        time.sleep(1.2)  # the loop writes the store's mark at most every second
    for suffix in ("-wal", "-shm"):
        Path(f"{tmp_path / 'd.db'}{suffix}").unlink(missing_ok=True)
    said = refused(server)
    assert "--accept-state-loss" in said and ("the engine has jobs of" in said or "gone back" in said)
    assert _alive(pid), "the refused start killed a running job it could not account for"
    with running(Server(tmp_path, db, [*OPTIONS, "--accept-state-loss"])):
        wait_for(lambda: not _alive(pid), what="the unaccounted job to be stopped once the loss is accepted")
    with running(Server(tmp_path, db, OPTIONS)):  # the mark starts anew: the next start is a plain one
        pass


def test_a_start_with_another_state_directory_refuses_instead_of_running_jobs_twice(tmp_path: Path) -> None:
    """`--state-dir` changed between two starts on one host, a job running: the new state directory had no
    record of it, so the start re-queued it ("job lost on the engine") and ran it again beside the first run,
    which went on. Now the start is refused, naming the slice, and runs nothing; the old directory adopts it."""
    db = f"sqlite:///{tmp_path / 'd.db'}"
    server = Server(tmp_path, db, OPTIONS)
    with running(server):
        c, long, slice_id, pid = _a_long_job(server, tmp_path)
        time.sleep(1.2)  # the mark
    said = refused(Server(tmp_path, db, [*OPTIONS, "--state-dir", str(tmp_path / "elsewhere")]))
    assert f"the store has 1 live slices that the state directory {tmp_path / 'elsewhere'} knows nothing of " \
           f"({slice_id})" in said and "--accept-state-loss" in said
    assert _alive(pid) and not (tmp_path / "elsewhere" / "tasks" / slice_id).exists()  # nothing run again
    with running(server):  # the state directory that ran it: adopted, as after any restart
        assert c.get(long).json()["state"] == "running" and c.get(long).json()["slice"] == slice_id
        assert _alive(pid)
        _cancel(server, c, long, pid)


def test_a_start_on_another_engine_refuses_instead_of_running_jobs_twice(tmp_path: Path) -> None:
    """`--engine` changed between two starts while a job ran (local, then Slurm): the new engine had no such
    job, so reconciling re-queued it and ran it again there while the local run went on. Now the start is
    refused before the engine is asked anything, naming the slice and both engines; the local engine then
    adopts it. (The Slurm site is never reached: the refusal comes first.)"""
    from disagg.engines.slurm_site import SlurmSite

    db = f"sqlite:///{tmp_path / 'd.db'}"
    server = Server(tmp_path, db, OPTIONS)
    with running(server):
        c, long, slice_id, pid = _a_long_job(server, tmp_path)
        time.sleep(1.2)  # the mark
    site = SlurmSite(root=tmp_path / "slurm", conf=tmp_path / "slurm" / "slurm.conf", netns="none", bridge="none")
    site.root.mkdir()
    slurm = tmp_path / "slurm.yaml"  # the engine is a setting of the config file (or DISAGG_ENGINE)
    slurm.write_text(f"engine: slurm\nslurm_site: {site.save()}\n")
    said = refused(Server(tmp_path, db, [*OPTIONS, "--config", str(slurm)]))
    assert f"the store's 1 live slices ({slice_id}) run on engine 'local', and this start uses engine 'slurm'" \
        in said and "--accept-state-loss" in said
    assert _alive(pid)
    with running(server):  # the engine that runs it: adopted, and the start names its engine in the mark
        assert c.get(long).json()["state"] == "running" and c.get(long).json()["slice"] == slice_id
        assert json.loads((tmp_path / "state" / "store-mark.json").read_text())["engine"] == "local"
        _cancel(server, c, long, pid)
        wait_for(lambda: c.get(long).json()["state"] == "cancelled", what="the job to be cancelled")
        time.sleep(1.2)  # the mark
    with running(Server(tmp_path, db, [*OPTIONS, "--config", str(slurm)])):
        pass  # nothing live: switching engines is a plain start


def test_a_restore_while_the_controller_runs_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """`disagg restore` on the store of a running `disagg serve` replaced it under the server: a running job
    and every job since the backup vanished from the listings while the job's processes ran on."""
    db = f"sqlite:///{tmp_path / 'd.db'}"
    backup = tmp_path / "backup.db"
    server = Server(tmp_path, db, OPTIONS)
    with running(server):
        c = Client(server, admin_token(tmp_path))
        assert runner.invoke(app, ["backup", str(backup), "--db", db]).exit_code == 0
        long = c.submit(["sleep", "60"])
        c.wait(long, "running")
        r = runner.invoke(app, ["restore", str(backup), "--db", db])
        assert r.exit_code == 1 and f"a disagg serve runs on the store {db}: stop it first" in r.output, r.output
        assert c.get(long).json()["state"] == "running"
        assert httpx.post(f"{server.url}/v1/jobs/{long}/cancel", headers=c.h, timeout=10).status_code == 202
        c.wait(long, "cancelled")
    r = runner.invoke(app, ["restore", str(backup), "--db", db])  # stopped: the restore goes ahead
    assert r.exit_code == 0, r.output


def test_a_tenant_removing_its_ended_job_leaks_nothing_and_the_restart_is_a_plain_one(tmp_path: Path) -> None:
    """A job ends before its slice does. DELETE of it while the slice tore down removed the rows that the
    teardown then wrote to (a foreign key): its GPU stayed attached to a slice the store no longer had, every
    other job's placement on it was a conflict, and the next start was refused. DELETE of a job whose slice
    was done left the engine's files of it, and the next start was refused ("the engine has jobs of 1 slices
    the store does not know"). Retention (`gc --older-than-s 0`) did the same as the first."""
    db = f"sqlite:///{tmp_path / 'd.db'}"
    slow = ["--latency-scale", "0.5", "--tick-s", "0.02", "--round-gap-s", "0.02"]  # detach: 1 s
    server = Server(tmp_path, db, slow)
    with running(server):
        c = Client(server, admin_token(tmp_path))
        job = c.submit(["true"], gpu=1)
        wait_for(lambda: c.get(job).json()["state"] == "completed", timeout=60, what="the job to complete")
        r = httpx.delete(f"{server.url}/v1/jobs/{job}", headers=c.h, timeout=10)
        assert r.status_code == 409 and "is still tearing down" in r.json()["detail"], r.text
        assert runner.invoke(app, ["gc", "--db", db, "--state-dir", str(tmp_path / "state"),
                                   "--older-than-s", "0"]).output.startswith('{"jobs": 0,')
        slice_id = c.get(job).json()["slice"]
        wait_for(lambda: httpx.get(f"{server.url}/v1/slices/{slice_id}", headers=c.h, timeout=10).json()["state"]
                 == "done", timeout=30, what="the slice to be done")
        assert httpx.delete(f"{server.url}/v1/jobs/{job}", headers=c.h, timeout=10).status_code == 204
        assert not (tmp_path / "state" / "tasks" / slice_id).exists()  # its files went with it
        devices = httpx.get(f"{server.url}/v1/devices", headers=c.h, params={"limit": 500}, timeout=10).json()
        assert all(d["state"] == "free" for d in devices["devices"]), devices
        time.sleep(1.2)  # the mark
    with running(Server(tmp_path, db, slow)) as restarted:  # a plain start: nothing was lost
        c = Client(restarted, admin_token(tmp_path))
        again = c.submit(["true"], gpu=1)
        wait_for(lambda: c.get(again).json()["state"] == "completed", timeout=60, what="a job after the restart")


def test_a_controller_of_another_store_on_a_state_directory_in_use_is_refused_even_accepting_loss(
        tmp_path: Path) -> None:
    """A second `serve` with another store but this state directory was refused as a state loss, whose words
    end in "start with --accept-state-loss". Followed, that start stopped the running controller's jobs (its
    orphans, as it saw them), which the first then re-ran, and overwrote the admin token."""
    db = f"sqlite:///{tmp_path / 'd.db'}"
    server = Server(tmp_path, db, OPTIONS)
    with running(server):
        c, long, _, pid = _a_long_job(server, tmp_path)
        token = admin_token(tmp_path)
        time.sleep(1.2)  # the mark
        other = f"sqlite:///{tmp_path / 'other.db'}"
        for extra in ([], ["--accept-state-loss"]):
            said = refused(Server(tmp_path, other, [*OPTIONS, *extra]))
            assert "a controller of another store" in said and "runs with the state directory" in said, said
            assert "start with --accept-state-loss" not in said
        assert _alive(pid) and admin_token(tmp_path) == token
        assert c.get(long).json()["state"] == "running" and c.get(long).json()["attempts"] == 1
        _cancel(server, c, long, pid)


def test_a_second_controller_on_a_symlink_to_the_sqlite_file_is_refused(tmp_path: Path) -> None:
    """The single-controller lock was keyed by the path given: through a symlink a second `serve` took the
    lease (forced, as SQLite's single controller does) and the first stepped down."""
    db = f"sqlite:///{tmp_path / 'd.db'}"
    with running(Server(tmp_path, db, OPTIONS)) as first:
        other = tmp_path / "b"
        other.mkdir()
        (other / "link.db").symlink_to(tmp_path / "d.db")
        said = refused(Server(other, f"sqlite:///{other / 'link.db'}", OPTIONS))
        assert "another disagg serve runs on the SQLite file" in said, said
        assert httpx.get(first.url + "/healthz", timeout=5).json()["role"] == "leader"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_backup_restores_and_resumes(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'd.db'}"
    backup = tmp_path / "backup.db"
    server = Server(tmp_path, db, OPTIONS)
    with running(server):
        c = Client(server, admin_token(tmp_path))
        first = c.submit(["true"])
        c.wait(first)
        time.sleep(1.2)  # the mark
        r = runner.invoke(app, ["backup", str(backup), "--db", db])  # online, while the controller runs
        assert r.exit_code == 0, r.output
        assert backup.stat().st_mode & 0o777 == 0o600
    (tmp_path / "d.db").unlink()  # the disaster
    for suffix in ("-wal", "-shm"):
        Path(f"{tmp_path / 'd.db'}{suffix}").unlink(missing_ok=True)
    assert runner.invoke(app, ["restore", str(backup), "--db", db]).exit_code == 0
    with running(server):  # nothing happened after the backup: a plain start
        assert c.get(first).json()["state"] == "completed"
        later = c.submit(["true"])
        c.wait(later)
        time.sleep(1.2)
    restore_store(db, backup)  # an old backup: `later` ran after it
    assert "accept-state-loss" in refused(server)
    resumed = Server(tmp_path, db, [*OPTIONS, "--accept-state-loss"])
    with running(resumed):
        c = Client(resumed, admin_token(tmp_path))
        assert c.get(first).json()["state"] == "completed" and c.get(later).status_code == 404
        third = c.submit(["true"])
        c.wait(third)


def test_a_postgresql_store_backs_up_and_restores(pg_server: Any) -> None:
    url = pg_server.create_database("t_backup")
    store = Store(url)
    store.migrate()
    token = store.create_token("alice")
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"disagg-pg-{os.getpid()}.dump"
    try:
        store.backup_to(path)
        info = store.tokens()[0]
        store.revoke_token(info.id)
        assert store.principal(token) is None
        store.close()
        restore_store(url, path)
        store = Store(url)
        who = store.principal(token)
        assert who is not None and who.tenant == "alice"
    finally:
        store.close()
        path.unlink(missing_ok=True)


def test_retention_removes_ended_jobs_their_rows_files_and_working_directories(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    svc.controller.start()
    try:
        j = submit(svc, "alice", command=["sh", "-c", "echo hi > note"], gpu=0)
        wait_state(svc, j, ("completed",))
        slice_id = job(svc, j)["slice"]
        # a job ends before its slice does, and retention takes it only then (it waited for neither)
        wait_for(lambda: svc.store.removable(j)[1] is None, what="the job's slice to be done")
        engine = svc.engine
        assert isinstance(engine, LocalEngine)
        work, state = engine.workdir(slice_id), engine.root / slice_id
        assert (work / "note").exists() and state.exists()
        assert collect(svc.store, engine, retention_s=3600).jobs == 0  # ended just now: kept
        r = runner.invoke(app, ["gc", "--older-than-s", "0", "--db", svc.config.db, "--state-dir",
                                str(tmp_path / "state")], env={"DISAGG_ALLOW_SAME_USER": str(SAME_USER).lower()})
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["jobs"] == 1
        assert svc.store.job_summaries() == [] and not work.exists() and not state.exists()
        assert svc.store.progress()[1] > 0  # the store's progress does not go back with what gc deleted
    finally:
        svc.close()


def test_a_tenants_queue_is_bounded(tmp_path: Path) -> None:
    svc = make_service(tmp_path, max_queued_per_tenant=2)  # no loop: the jobs stay queued
    try:
        alice, bob = svc.store.create_token("alice"), svc.store.create_token("bob")
        with TestClient(create_app(svc.jobs)) as client:
            def post(token: str) -> int:
                r = client.post("/v1/jobs", headers={"Authorization": f"Bearer {token}"},
                                json={"name": "q", "command": ["true"]})
                return r.status_code

            assert [post(alice) for _ in range(3)] == [201, 201, 429]
            assert post(bob) == 201
    finally:
        svc.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="as root, a tenant's user is looked up and made")
def test_a_job_without_a_user_it_may_run_as_fails_with_the_reason(tmp_path: Path) -> None:
    svc = make_service(tmp_path, tenants=[{"name": "carol", "unix_user": "nosuchuser"}])
    svc.controller.start()
    try:
        j = submit(svc, "carol", gpu=0)
        ended = wait_state(svc, j, ("failed", "completed"))
        assert ended["state"] == "failed" and ended["reason_code"] == "refused"
        assert "'nosuchuser'" in ended["reason"] and "does not exist" in ended["reason"]
        assert ended["attempts"] == 1  # refused once, not retried
    finally:
        svc.close()


def test_without_cgroups_tasks_run_in_process_groups_and_the_start_says_so(tmp_path: Path) -> None:
    svc = make_service(tmp_path, cgroup_parent=None)
    svc.controller.start()
    try:
        assert any("no cgroups" in note and "process groups" in note for note in svc.engine.notes())
        j = submit(svc, "alice", command=["sleep", "60"], gpu=0)
        wait_state(svc, j, ("running",))
        slice_id = job(svc, j)["slice"]
        pid = _runner_pid(tmp_path, slice_id)
        svc.jobs.cancel(j)
        wait_state(svc, j, ("cancelled",))
        wait_for(lambda: not _alive(pid), what="the runner and its tasks to be gone")
    finally:
        svc.close()


@pytest.mark.parametrize("relative", [True, False], ids=["relative-store", "absolute-store"])
def test_a_two_task_job_reads_its_hostfile_wherever_the_store_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 relative: bool) -> None:
    """DISAGG_HOSTFILE was relative to the state directory while the task ran inside it: with the default
    store path (./disagg.db) every multi-task job failed to open it."""
    monkeypatch.chdir(tmp_path)
    root = Path(".") if relative else tmp_path
    server = Server(root, "sqlite:///d.db" if relative else f"sqlite:///{tmp_path / 'd.db'}", OPTIONS)
    with running(server):
        c = Client(server, admin_token(root))
        script = 'echo SLOT $DISAGG_MACHINE "$(sed -n "$((DISAGG_TASK_INDEX + 1))p" "$DISAGG_HOSTFILE")" ' \
                 '"$(wc -l < "$DISAGG_HOSTFILE")"'
        j = c.submit(["sh", "-c", script], count=2, gpu=0)
        c.wait(j)
        logs = httpx.get(f"{c.url}/v1/jobs/{j}/logs", headers=c.h, timeout=10).json()["logs"]
        slots = [line.split("SLOT ")[1].split() for line in logs.splitlines() if "SLOT " in line]
        assert len(slots) == 2 and all(len(s) == 4 for s in slots), logs
        assert len(slots) == 2 and all(machine == line_machine and n == "2" for machine, line_machine, _, n in slots)
        assert {s[0] for s in slots} == {f"{c.get(j).json()['slice']}-m0", f"{c.get(j).json()['slice']}-m1"}
