"""SlurmEngine driven directly through a slice's life against the real Slurm of the session fixture."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from disagg.engines.base import SliceMachine, SliceSpec, TaskStatus
from disagg.engines.slurm import JOB_PREFIX, SlurmEngine
from disagg.engines.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm

TENANT = "alice"   # jobs run as her Unix user (disagg-alice, made on first use)
REPORT = ("bash", "-c", 'echo "rank=$SLURM_PROCID node=$SLURMD_NODENAME devices=$DISAGG_DEVICES '
          'cvd=$CUDA_VISIBLE_DEVICES nodes=$SLURM_JOB_NODELIST"')


def wait_done(engine: SlurmEngine, handle: str, timeout_s: float = 60.0) -> TaskStatus:
    """Poll until the job left pending/held/running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = engine.status(handle)
        if st.state not in ("pending", "held", "running"):
            return st
        time.sleep(0.1)
    raise AssertionError(f"job {handle} still {engine.status(handle)} after {timeout_s} s")


def wait_state(engine: SlurmEngine, handle: str, state: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while engine.status(handle).state != state:
        if time.monotonic() > deadline:
            raise AssertionError(f"job {handle} is {engine.status(handle)}, never {state}")
        time.sleep(0.05)


def run_slice(engine: SlurmEngine, spec: SliceSpec) -> tuple[TaskStatus, str]:
    """The whole life: launch machines, prepare, launch, wait, destroy machines."""
    for m in spec.machines:
        engine.launch_machine(spec, m)
    handle = engine.prepare_task(spec)
    assert engine.status(handle).state == "held"
    engine.launch_task(handle)
    status = wait_done(engine, handle)
    logs = engine.logs(handle)
    for m in spec.machines:
        engine.destroy_machine(spec, m)
    return status, logs


def disagg_jobs_in_squeue(engine: SlurmEngine) -> list[str]:
    return [str(j["name"]) for j in engine._squeue()
            if str(j.get("name", "")).startswith(JOB_PREFIX) and j.get("job_state") in ("PENDING", "RUNNING")]


def parse_lines(logs: str) -> dict[str, dict[str, str]]:
    """`rank=0 node=x devices=a,b ...` lines → {rank: {key: value}}."""
    out = {}
    for line in logs.splitlines():
        if line.startswith("rank="):
            fields = dict(part.split("=", 1) for part in line.split())
            out[fields["rank"]] = fields
    return out


def test_one_task_two_gpus_sees_exactly_its_slice(engine: SlurmEngine, slurm_cluster: SlurmCluster) -> None:
    before = engine.node_gres()
    spec = SliceSpec("s1", "job1", REPORT, (SliceMachine("s1-m0", "m0", 2, 4, ("m0/gpu1", "pool0/gpu3")),),
                     tenant=TENANT)
    status, logs = run_slice(engine, spec)
    assert status == TaskStatus("completed", 0, status.detail), logs
    lines = parse_lines(logs)
    assert set(lines) == {"0"}
    assert lines["0"]["node"] == "s1-m0"
    assert lines["0"]["devices"] == "m0/gpu1,pool0/gpu3"
    assert lines["0"]["cvd"] == "0,1"
    assert engine.node_gres() == before          # the slice node left, static nodes untouched
    assert "s1-m0" not in engine.node_gres()
    assert disagg_jobs_in_squeue(engine) == []


def test_two_tasks_two_gpus_each_srun_sees_both_nodes(engine: SlurmEngine) -> None:
    before = engine.node_gres()
    spec = SliceSpec("s2", "job2", REPORT, (
        SliceMachine("s2-m0", "m0", 2, 4, ("m0/gpu2", "m0/gpu3")),
        SliceMachine("s2-m1", "m1", 2, 4, ("m1/gpu0", "pool0/gpu1")),   # one of them remote
    ), tasks=2, tenant=TENANT)
    status, logs = run_slice(engine, spec)
    assert status.state == "completed", logs
    lines = parse_lines(logs)
    assert set(lines) == {"0", "1"}
    by_node = {f["node"]: f for f in lines.values()}
    assert set(by_node) == {"s2-m0", "s2-m1"}
    assert by_node["s2-m0"]["devices"] == "m0/gpu2,m0/gpu3"
    assert by_node["s2-m1"]["devices"] == "m1/gpu0,pool0/gpu1"
    assert all(f["nodes"] == "s2-m[0-1]" for f in lines.values())
    assert engine.node_gres() == before
    assert disagg_jobs_in_squeue(engine) == []


def test_uneven_gpu_counts_get_all_their_node_gpus(engine: SlurmEngine) -> None:
    spec = SliceSpec("s3", "job3", REPORT, (
        SliceMachine("s3-m0", "m2", 1, 2, ("m2/gpu0",)),
        SliceMachine("s3-m1", "m3", 1, 2, ("m3/gpu0", "m3/gpu1", "pool0/gpu2")),
    ), tasks=2, tenant=TENANT)
    status, logs = run_slice(engine, spec)
    assert status.state == "completed", logs
    by_node = {f["node"]: f["devices"] for f in parse_lines(logs).values()}
    assert by_node == {"s3-m0": "m2/gpu0", "s3-m1": "m3/gpu0,m3/gpu1,pool0/gpu2"}


def test_failing_command_reports_its_exit_code_and_output(engine: SlurmEngine) -> None:
    spec = SliceSpec("s4", "job4", ("bash", "-c", "echo boom >&2; exit 3"),
                     (SliceMachine("s4-m0", "m0", 1, 1, ("m0/gpu0",)),), tenant=TENANT)
    status, logs = run_slice(engine, spec)
    assert (status.state, status.exit_code) == ("failed", 3)
    assert "boom" in logs


def test_prepare_is_idempotent_and_cancel_of_a_held_job(engine: SlurmEngine) -> None:
    spec = SliceSpec("s5", "job5", ("true",), (SliceMachine("s5-m0", "m1", 1, 1, ("m1/gpu3",)),), tenant=TENANT)
    engine.launch_machine(spec, spec.machines[0])
    engine.launch_machine(spec, spec.machines[0])          # joining twice is a no-op
    handle = engine.prepare_task(spec)
    (engine.site.jobs_dir / "s5" / "slurm_job_id").unlink()   # crash between sbatch and noting its id
    assert engine.prepare_task(spec) == handle == "s5"     # found again by name, not submitted twice
    assert [j for j in disagg_jobs_in_squeue(engine) if j == f"{JOB_PREFIX}s5"] == [f"{JOB_PREFIX}s5"]
    engine.cancel(handle)
    engine.cancel(handle)
    assert engine.status(handle).state == "cancelled"
    engine.destroy_machine(spec, spec.machines[0])
    engine.destroy_machine(spec, spec.machines[0])         # leaving twice is a no-op
    assert "s5-m0" not in engine.node_gres()


def test_foreign_sbatch_is_reported_as_holding_its_node_and_gpus(
    engine: SlurmEngine, slurm_cluster: SlurmCluster
) -> None:
    site = slurm_cluster.site
    first = site.run(["sbatch", "--parsable", "-p", "static", "-w", "n1", "--gres=gpu:2", "-o", "/dev/null",
                      "--wrap", "sleep 60"]).stdout.strip()
    second = site.run(["sbatch", "--parsable", "-p", "static", "-w", "n1", "--gres=gpu:1", "-o", "/dev/null",
                       "--wrap", "sleep 60"]).stdout.strip()
    # named like disagg's jobs, but submitted by a user: still foreign
    third = site.run(["sbatch", "--parsable", "-p", "static", "-w", "n3", "--gres=gpu:1", "-o", "/dev/null",
                      "-J", f"{JOB_PREFIX}sneaky", "--wrap", "sleep 60"]).stdout.strip()
    # a disagg job running at the same time is not foreign
    spec = SliceSpec("s6", "job6", ("sleep", "60"), (SliceMachine("s6-m0", "m2", 1, 1, ("m2/gpu0",)),), tenant=TENANT)
    engine.launch_machine(spec, spec.machines[0])
    handle = engine.prepare_task(spec)
    engine.launch_task(handle)
    try:
        deadline = time.monotonic() + 60
        while len(engine.foreign_holdings()) < 3 or engine.status(handle).state != "running":
            assert time.monotonic() < deadline, engine.foreign_holdings()
            time.sleep(0.1)
        held = {h.job: h for h in engine.foreign_holdings()}
        assert set(held) == {first, second, third}
        assert {(h.node, h.machine) for h in held.values()} == {("n1", "m1"), ("n3", "m3")}
        assert held[first].devices == ("m1/gpu0", "m1/gpu1")
        assert held[second].devices == ("m1/gpu2",)
        assert held[third].devices == ("m3/gpu0",)
        assert all(h.cpus >= 1 for h in held.values())
    finally:
        site.run(["scancel", first, second, third], check=False)
        engine.cancel(handle)
        engine.destroy_machine(spec, spec.machines[0])
    # a cancelled job holds its node (COMPLETING) until its slurmd reports the job's processes gone:
    # usually 0.1 s, once over 15 s on a loaded CI machine; what matters is that it ends
    deadline = time.monotonic() + 90
    while engine.foreign_holdings():
        assert time.monotonic() < deadline, engine.foreign_holdings()
        time.sleep(0.1)


def test_killed_slurmd_yields_lost(engine: SlurmEngine) -> None:
    import os
    import signal

    before = engine.node_gres()
    spec = SliceSpec("s7", "job7", ("sleep", "120"), (SliceMachine("s7-m0", "m3", 1, 1, ("m3/gpu2",)),), tenant=TENANT)
    engine.launch_machine(spec, spec.machines[0])
    handle = engine.prepare_task(spec)
    engine.launch_task(handle)
    wait_state(engine, handle, "running")
    pid = engine.nodes.slurmd_pid("s7-m0")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    status = wait_done(engine, handle, timeout_s=60)
    assert status.state == "lost"           # the machine failed, not the job: the controller re-queues
    assert "s7-m0" in status.detail and "slurmd" in status.detail
    engine.destroy_machine(spec, spec.machines[0])
    assert engine.node_gres() == before
    assert disagg_jobs_in_squeue(engine) == []


def test_a_restarted_engine_adopts_the_running_job_and_does_not_rerun_it(
    engine: SlurmEngine, slurm_cluster: SlurmCluster, drop_dir: Path
) -> None:
    runs = drop_dir / "s8-runs"
    spec = SliceSpec("s8", "job8", ("bash", "-c", f"echo run >> {runs}; sleep 3"),
                     (SliceMachine("s8-m0", "m0", 1, 1, ("m0/gpu3",)),), tenant=TENANT)
    engine.launch_machine(spec, spec.machines[0])
    handle = engine.prepare_task(spec)
    engine.launch_task(handle)
    wait_state(engine, handle, "running")

    restarted = SlurmEngine(slurm_cluster.site)            # a controller restart: a fresh engine object
    adopted = restarted.job_of(spec)
    assert adopted is not None
    assert adopted[0] == handle and adopted[1].state == "running"
    assert "s8-m0" in restarted.joined_machines()
    restarted.launch_machine(spec, spec.machines[0])       # replaying the slice's steps is harmless
    assert restarted.prepare_task(spec) == handle
    restarted.launch_task(handle)
    assert wait_done(restarted, handle).state == "completed"
    assert runs.read_text() == "run\n"                     # ran exactly once
    restarted.destroy_machine(spec, spec.machines[0])
    assert restarted.job_of(SliceSpec("never", "j", ("true",), spec.machines, tenant=TENANT)) is None


def test_clean_orphans_cancels_unknown_jobs_and_makes_unknown_machines_leave(engine: SlurmEngine) -> None:
    keep = SliceSpec("s9", "job9", ("true",), (SliceMachine("s9-m0", "m2", 1, 1, ("m2/gpu3",)),), tenant=TENANT)
    orphan = SliceSpec("s10", "job10", ("sleep", "60"), (SliceMachine("s10-m0", "m2", 1, 1, ("m2/gpu2",)),),
                       tenant=TENANT)
    for spec in (keep, orphan):
        engine.launch_machine(spec, spec.machines[0])
    kept = engine.prepare_task(keep)
    lost = engine.prepare_task(orphan)
    cleaned = engine.clean_orphans(keep_slices=["s9"], keep_machines=["s9-m0"])
    assert cleaned == {"jobs": [lost], "machines": ["s10-m0"]}
    assert engine.status(lost).state == "cancelled"
    assert engine.status(kept).state == "held"
    assert engine.joined_machines() == ["s9-m0"]
    assert "s10-m0" not in engine.node_gres()
