"""A tenant's job on the Slurm engine is untrusted code, as on the local engine (issue 13), and a
preempted one gets SIGTERM and its grace before the kill (issue 15): tried against the session's real
Slurm with two tenants, alice and bob.

The controller runs in this process with `engine: slurm`, its store and state in a directory everyone
may pass (0755) and with the umask `disagg serve` sets (077), so what protects them is their own
permissions; a canary variable sits in its environment.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from tests.attacks import COHORT, GRACE_S, PATIENT, PROBE

from disagg.api import create_app
from disagg.control.config import Config
from disagg.control.service import Service, open_service
from disagg.engines.base import SliceMachine, SliceSpec, TaskRefused
from disagg.engines.slurm import SlurmEngine
from disagg.engines.slurm_cluster import SlurmCluster
from disagg.store.models import JobRow

pytestmark = pytest.mark.slurm

CANARY = "operator-secret-slurm-7d2e"
#: A task that notes SIGTERM and goes on (short sleeps: bash runs a trap only between commands).
STUBBORN = ("bash", "-c", 'trap "echo TERM >> $0" TERM; echo started >> $0; '
                          'for i in $(seq 1 600); do sleep 0.1; done; echo end >> $0')


@dataclass
class TwoOnSlurm:
    """A controller on Slurm with tenants alice and bob, their tokens, and a client."""

    svc: Service
    client: TestClient
    root: Path
    tokens: dict[str, str]

    def h(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def submit(self, who: str, command: list[str], **tasks: Any) -> str:
        body = {"name": "attack", "command": command, "max_retries": 0,
                "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0, **tasks}}
        r = self.client.post("/v1/jobs", headers=self.h(who), json=body)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def job(self, who: str, job_id: str) -> dict[str, Any]:
        return dict(self.client.get(f"/v1/jobs/{job_id}", headers=self.h(who)).json())

    def wait(self, who: str, job_id: str, *states: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (job := self.job(who, job_id))["state"] not in states:
            assert time.monotonic() < deadline, f"{job_id} not {states}: {job}"
            time.sleep(0.1)
        return job

    def logs(self, who: str, job_id: str) -> str:
        return str(self.client.get(f"/v1/jobs/{job_id}/logs", headers=self.h(who)).json()["logs"])

    def probe(self, who: str, *specs: str) -> dict[str, str]:
        """Run PROBE as `who`'s job and return what each attempt met."""
        job_id = self.submit(who, ["python3", "-c", PROBE, *specs])
        self.wait(who, job_id, "completed", "failed")
        logs = self.logs(who, job_id)
        line = next((x for x in logs.splitlines() if x.startswith("PROBE ")), None)
        assert line is not None, logs
        return dict(json.loads(line.removeprefix("PROBE ")))

    @property
    def engine(self) -> SlurmEngine:
        assert isinstance(self.svc.engine, SlurmEngine)
        return self.svc.engine


@pytest.fixture(scope="module")
def two(slurm_cluster: SlurmCluster) -> Iterator[TwoOnSlurm]:
    root = Path(tempfile.mkdtemp(prefix="disagg-slurm-attack-"))
    root.chmod(0o755)  # anyone may pass: only the store's and the state's own modes protect them
    machines = [{"name": n.machine, "rack": "r0", "cpus": n.cpus, "memory_gb": 64, "uplink_gbps": 40,
                 "devices": {"gpu": {"model": "P100", "count": len(n.gpus)}}} for n in slurm_cluster.site.static_nodes]
    (root / "cluster.yaml").write_text(yaml.safe_dump({"machines": machines, "network": {"rack_uplink_gbps": 100}}))
    settings = Config(db=f"sqlite:///{root / 'd.db'}", cluster=str(root / "cluster.yaml"),
                      state_dir=str(root / "state"), latency_scale=0.002, tick_s=0.05, engine="slurm",
                      slurm_site=str(slurm_cluster.site.save()), tenants=[{"name": "alice"}, {"name": "bob"}],
                      unix_user_prefix="disagg-")  # the tests' users (the default is one prefix per controller)
    os.environ["OPERATOR_SECRET"] = CANARY  # in the server's environment, which no job may see
    umask = os.umask(0o077)                  # as `disagg serve` sets it
    try:
        svc = open_service(settings)
        svc.controller.start()
        tokens = {who: svc.store.create_token(who) for who in ("alice", "bob")}
        with TestClient(create_app(svc.jobs)) as client:
            yield TwoOnSlurm(svc, client, root, tokens)
        svc.close()
    finally:
        os.umask(umask)
        os.environ.pop("OPERATOR_SECRET", None)
        shutil.rmtree(root, ignore_errors=True)


def test_a_slurm_job_runs_as_its_tenants_user_and_sees_none_of_the_servers_variables(two: TwoOnSlurm) -> None:
    job = two.submit("alice", ["sh", "-c", "id -u; id -G | wc -w; env"], gpu=1)
    assert two.wait("alice", job, "completed", "failed")["state"] == "completed", two.logs("alice", job)
    logs = two.logs("alice", job)
    uid, groups, *env_lines = logs.splitlines()
    assert int(uid) == pwd.getpwnam("disagg-alice").pw_uid != os.geteuid()
    account = two.engine.accounts.of("alice")
    assert account.uid == int(uid)
    assert groups.strip() == "1"                      # no supplementary group
    assert CANARY not in logs and "d.db" not in logs
    env = dict(line.split("=", 1) for line in env_lines if "=" in line)
    # the local engine's list, and Slurm's own variables (its SLURM_*, the node's name, TMPDIR, GPU order)
    ours = {"PATH", "HOME", "USER", "LANG", "CUDA_VISIBLE_DEVICES"}
    slurms = {"SLURMD_NODENAME", "TMPDIR", "ENVIRONMENT", "HOSTNAME", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
              "ZE_AFFINITY_MASK"}
    shells = {"PWD", "SHLVL", "_", "OLDPWD"}
    assert {k for k in env if not k.startswith(("DISAGG_", "SLURM_", "SRUN_"))} <= ours | slurms | shells, sorted(env)
    assert env["USER"] == "disagg-alice" and env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert set(env) >= {"DISAGG_JOB", "DISAGG_SLICE", "DISAGG_HOSTFILE", "DISAGG_WORKDIR", "DISAGG_DEVICES",
                        "DISAGG_TASK_INDEX", "DISAGG_MACHINE", "DISAGG_HOST", "DISAGG_ATTEMPT"}
    assert all(Path(env[k]).is_absolute() for k in ("DISAGG_HOSTFILE", "DISAGG_WORKDIR", "HOME"))
    work = Path(env["DISAGG_WORKDIR"])
    assert env["HOME"] == env["PWD"] == str(work) and env["SLURM_SUBMIT_DIR"] == str(work)
    info = work.stat()
    assert (info.st_uid, info.st_mode & 0o777) == (account.uid, 0o700)
    assert two.root not in work.parents and two.engine.site.root / "jobs" not in work.parents


def test_a_slurm_job_can_open_neither_the_controllers_files_nor_another_tenants(two: TwoOnSlurm) -> None:
    """It opened the store, the state, slurmctld's state (every job's script), disagg's records of its own
    and of bob's job (to write an exit code), bob's working directory and bob's output."""
    bob = two.submit("bob", ["sh", "-c", "echo secret > mine; echo WORK $(pwd); sleep 60"])
    two.wait("bob", bob, "running")
    deadline = time.monotonic() + 30
    while "WORK " not in two.logs("bob", bob):
        assert time.monotonic() < deadline, two.logs("bob", bob)
        time.sleep(0.1)
    work = Path(two.logs("bob", bob).split("WORK ")[1].split()[0])
    bob_slice = two.job("bob", bob)["slice"]
    site, state, db = two.engine.site, two.root / "state", two.root / "d.db"
    specs = [f"r:{db}", f"w:{db}", f"r:{db}-wal", f"l:{state}", f"r:{state}/fabric.db",
             f"l:{site.root / 'state'}", f"l:{site.jobs_dir}", f"x:{site.jobs_dir}/{{slice}}/exit",
             f"r:{site.jobs_dir}/{{slice}}/job.sh", f"x:{site.jobs_dir}/{bob_slice}/exit",
             f"l:{work}", f"r:{work}/mine", f"w:{work}/planted", f"r:{work.parent}/output.log",
             f"w:{work.parent}/task.sh", f"l:{work.parent.parent}"]
    met = two.probe("alice", *specs)
    assert met == {s: "PermissionError" for s in specs}, met
    r = two.client.post(f"/v1/jobs/{bob}/cancel", headers=two.h("bob"))
    assert r.status_code == 202, r.text
    assert two.wait("bob", bob, "cancelled")["state"] == "cancelled"   # not "completed, exit 0"
    assert (work / "mine").read_text() == "secret\n" and not (work / "planted").exists()


def _stubborn(engine: SlurmEngine, sid: str, marks: Path) -> tuple[SliceSpec, str]:
    """Start a job whose task notes SIGTERM in `marks` and carries on; wait until it runs."""
    spec = SliceSpec(sid, sid, (*STUBBORN, str(marks)), (SliceMachine(f"{sid}-m0", "m1", 1, 1, ("m1/gpu1",)),),
                     tenant="alice")
    engine.launch_machine(spec, spec.machines[0])
    handle = engine.prepare_task(spec)
    engine.launch_task(handle)
    _until(lambda: marks.exists() and "started" in marks.read_text(), "the task to start")
    return spec, handle


def _until(cond: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_preempted_job_sees_sigterm_keeps_its_grace_then_is_killed(engine: SlurmEngine, drop_dir: Path) -> None:
    marks = drop_dir / "preempted"
    spec, handle = _stubborn(engine, "sp1", marks)
    assert engine.terminate(handle)
    _until(lambda: "TERM" in marks.read_text(), "SIGTERM to reach the task")
    time.sleep(2.0)                                       # its grace: it caught the signal and goes on
    assert engine.status(handle).state == "running"
    engine.cancel(handle)        # the grace is over: killed now, not after Slurm's KillWait (30 s)
    _until(lambda: not _processes_of(marks), "the task's processes to be killed", timeout_s=5)
    assert engine.status(handle).state == "cancelled", engine.status(handle)
    engine.destroy_machine(spec, spec.machines[0])
    seen = marks.read_text().split()
    assert seen[:2] == ["started", "TERM"] and "end" not in seen, seen   # (scancel's own SIGTERM may follow)


def _processes_of(marks: Path) -> list[int]:
    """The pids of the processes whose command line names `marks` (the stubborn task's)."""
    import psutil

    out = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if str(marks) in " ".join(proc.info["cmdline"] or ()):
            out.append(int(proc.info["pid"]))
    return out


def test_a_cancelled_job_sees_sigterm_before_it_is_killed(engine: SlurmEngine, drop_dir: Path) -> None:
    marks = drop_dir / "cancelled"
    spec, handle = _stubborn(engine, "sp2", marks)
    engine.cancel(handle)
    _until(lambda: "TERM" in marks.read_text(), "SIGTERM to reach the task")
    began = time.monotonic()
    engine.destroy_machine(spec, spec.machines[0])        # the teardown: what is left is killed
    took = time.monotonic() - began
    _until(lambda: not _processes_of(marks), "the task's processes to be killed", timeout_s=10)
    assert engine.status(handle).state == "cancelled"
    assert "end" not in marks.read_text()
    # The task caught the SIGTERM and carried on: the teardown killed it rather than wait out Slurm's
    # KillWait (30 s), after which the node's deletion waited ~25 s more (36 s in all, before the fix).
    assert took < 20.0, f"destroy_machine took {took:.1f} s: it waited for KillWait"
    assert engine.nodes.node_state(spec.machines[0].name) is None


def test_a_job_without_a_user_it_may_run_as_is_refused(engine: SlurmEngine) -> None:
    machines = (SliceMachine("sp3-m0", "m2", 1, 1, ()),)
    with pytest.raises(TaskRefused, match="no tenant"):
        engine.prepare_task(SliceSpec("sp3", "sp3", ("true",), machines))
    bad = SlurmEngine(engine.site, isolation=_isolation({"name": "carol", "unix_user": "root"}))
    with pytest.raises(TaskRefused, match="uid or gid 0"):
        bad.prepare_task(SliceSpec("sp4", "sp4", ("true",), machines, tenant="carol"))
    assert engine.slurm_job_id("sp3") is None and engine.slurm_job_id("sp4") is None


def _isolation(*tenants: dict[str, Any]) -> Any:
    from disagg.engines.local import Isolation
    from disagg.model.tenants import parse_tenants

    return Isolation(parse_tenants(list(tenants), "tenants"))




def test_preemption_on_slurm_gives_sigterm_and_the_grace_then_requeues(
    slurm_cluster: SlurmCluster, tmp_path: Path, drop_dir: Path
) -> None:
    """Issue 15 end to end on Slurm: alice borrows, bob reclaims; alice's victims see SIGTERM, keep their
    grace, are killed, and complete once in a later attempt."""
    machines = [{"name": "m0", "rack": "r0", "cpus": 16, "memory_gb": 64, "uplink_gbps": 40,
                 "devices": {"gpu": {"model": "P100", "count": 4}}},
                {"name": "m1", "rack": "r0", "cpus": 16, "memory_gb": 64, "uplink_gbps": 40,
                 "devices": {"gpu": {"model": "P100", "count": 1}}}]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"machines": machines}))
    settings = Config(db=f"sqlite:///{tmp_path / 'd.db'}", cluster=str(tmp_path / "cluster.yaml"),
                      state_dir=str(tmp_path / "state"), latency_scale=0.002, tick_s=0.05, engine="slurm",
                      slurm_site=str(slurm_cluster.site.save()), tenants=COHORT, preempt_grace_s=GRACE_S)
    svc = open_service(settings)
    svc.controller.start()
    try:
        def submit(tenant: str, name: str, duration: float) -> str:
            body = {"name": name, "image": "rodinia/nw", "slo_s": 600.0, "importance": 1.0, "max_retries": 2,
                    "command": ["python3", "-c", PATIENT, str(drop_dir), str(duration)],
                    "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0, "gpu": 1, "nvme": 0, "fpga": 0,
                              "memory": 0}}
            return str(svc.jobs.submit(tenant, body)[0]["id"])

        def state(job_id: str) -> str:
            with svc.store.read() as s:
                row = s.get(JobRow, job_id)
                assert row is not None
                return str(row.state)

        alice = [submit("alice", f"a{i}", 6.0) for i in range(6)]
        _until(lambda: sum(state(j) == "running" for j in alice) == 5, "alice to hold 5 GPUs", 60)
        _until(lambda: len(list(drop_dir.glob("up-*"))) == 5, "alice's jobs to be up", 60)
        bob = [submit("bob", f"b{i}", 1.0) for i in range(2)]
        _until(lambda: all(state(j) == "completed" for j in alice + bob), "every job to end", 150)
        preempted = [j for j in alice if any("preempted by" in (e["why"] or "") for e in svc.store.job_events(j))]
        history = {j: [(round(e["at"], 2), e["subject"], e["to"], e["why"]) for e in svc.store.job_events(j)]
                   for j in alice + bob}
        assert len(preempted) == 2, f"bob's two jobs reclaim two of alice's three borrowed GPUs: {history}"
        for j in preempted:
            events = svc.store.job_events(j)
            signalled = next(e for e in events if (e["why"] or "").startswith("preempted by"))
            stopped = next(e for e in events if e["subject"] == "slice" and e["to"] == "tearing-down"
                           and "preempted by" in (e["why"] or ""))
            assert stopped["at"] - signalled["at"] >= GRACE_S - 0.05, "the grace period was observed"
            assert (drop_dir / f"term-{j}-1").exists(), f"{j} saw SIGTERM in its first attempt"
            assert (drop_dir / f"done-{j}").read_text().split() == ["2"]
        for j in alice + bob:
            assert len((drop_dir / f"done-{j}").read_text().split()) == 1, f"{j} completed exactly once"
    finally:
        svc.close()
