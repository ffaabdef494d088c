"""The emulated fabric and the local engine: idempotent operations, faults, state that outlives the
controller, tasks that see their devices."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from control_helpers import SAME_USER, TEST_CGROUP, make_service, wait_for

from disagg.control.service import DEFAULT_CLUSTER
from disagg.engines.base import SliceMachine, SliceSpec
from disagg.engines.local import Isolation, LocalEngine
from disagg.fabric.base import FabricError
from disagg.fabric.emulated import EmulatedFabric, OperationLatencies
from disagg.model import load_cluster


@pytest.fixture
def fabric(tmp_path: Path) -> EmulatedFabric:
    return EmulatedFabric(tmp_path / "fabric.db", load_cluster(DEFAULT_CLUSTER), scale=0.0)


def test_attach_and_detach_are_idempotent(fabric: EmulatedFabric) -> None:
    a = fabric.attach("iobox0/gpu0", "node0", "pcie-over-ethernet")
    again = fabric.attach("iobox0/gpu0", "node0", "pcie-over-ethernet")
    assert a == again and a.mechanism == "pcie-over-ethernet"
    assert [(x.device, x.machine) for x in fabric.attachments()] == [("iobox0/gpu0", "node0")]
    fabric.detach("iobox0/gpu0", "node0")
    fabric.detach("iobox0/gpu0", "node0")
    fabric.detach("iobox0/gpu1", "node3")  # never attached: fine
    assert fabric.attachments() == []


def test_a_device_held_by_one_machine_cannot_go_to_another(fabric: EmulatedFabric) -> None:
    fabric.attach("iobox0/gpu0", "node0", "pcie-over-ethernet")
    with pytest.raises(FabricError, match="attached to node0") as exc:
        fabric.attach("iobox0/gpu0", "node1", "pcie-over-ethernet")
    assert not exc.value.retryable


@pytest.mark.parametrize(("fault", "message"), [
    (lambda f: f.fail_device("iobox0/gpu2"), "has failed"),
    (lambda f: f.drop_link("up:iobox0"), "link up:iobox0"),
    (lambda f: f.drop_link("up:node2"), "link up:node2"),
], ids=["device-failed", "pool-uplink-down", "machine-uplink-down"])
def test_faults_refuse_attaches_that_need_the_broken_part(fabric: EmulatedFabric, fault, message) -> None:
    fault(fabric)
    with pytest.raises(FabricError, match=message):
        fabric.attach("iobox0/gpu2", "node2", "pcie-over-ethernet")
    # something that does not use the broken part still works
    fabric.attach("iobox1/nvme0", "node1", "pcie-over-ethernet")


def test_a_paused_leaders_attach_lands_nowhere_once_a_newer_epoch_fenced_the_fabric(tmp_path: Path) -> None:
    """The replicas' failover (CI): a leader stopped in the middle of an attach's latency, resumed after
    another replica took the lease and reconciled, used to land its attachment then: a device no slice
    holds, and the next start refused as a state loss. The fabric keeps the newest epoch and refuses."""
    import threading

    cluster = load_cluster(DEFAULT_CLUSTER)
    old = EmulatedFabric(tmp_path / "fabric.db", cluster, OperationLatencies(attach_device=0.5, detach_device=0.0))
    new = EmulatedFabric(tmp_path / "fabric.db", cluster, scale=0.0)
    old.fence(4)
    errors: list[BaseException] = []

    def attach() -> None:
        try:
            old.attach("iobox0/gpu2", "node0", "pcie-over-ethernet")
        except FabricError as exc:
            errors.append(exc)

    paused = threading.Thread(target=attach)
    paused.start()
    new.fence(5)  # the takeover, while the old leader sleeps in its attach
    paused.join()
    assert len(errors) == 1 and "fenced" in str(errors[0]) and not errors[0].retryable  # type: ignore[attr-defined]
    assert new.attachments() == []
    new.attach("iobox0/gpu2", "node1", "pcie-over-ethernet")
    with pytest.raises(FabricError, match="epoch 5"):
        old.detach("iobox0/gpu2", "node1")  # nor may it take the new leader's device away
    assert [(a.device, a.machine) for a in new.attachments()] == [("iobox0/gpu2", "node1")]
    with pytest.raises(FabricError, match="fenced"):
        old.fence(4)  # an old epoch is refused: the store went back, or another store drives the fabric
    old.fence(4, force=True)  # unless the operator accepts the loss
    old.detach("iobox0/gpu2", "node1")
    assert new.attachments() == []


def test_attach_timeouts_are_injected_and_retryable(fabric: EmulatedFabric) -> None:
    fabric.inject_attach_timeouts(1)
    with pytest.raises(FabricError, match="timed out") as exc:
        fabric.attach("iobox0/gpu0", "node0", "pcie-over-ethernet")
    assert exc.value.retryable
    fabric.attach("iobox0/gpu0", "node0", "pcie-over-ethernet")  # the next one goes through


def test_fabric_state_survives_a_new_driver_on_the_same_file(tmp_path: Path) -> None:
    cluster = load_cluster(DEFAULT_CLUSTER)
    f1 = EmulatedFabric(tmp_path / "f.db", cluster, scale=0.0)
    f1.attach("iobox0/gpu0", "node0", "pcie-over-ethernet", gbps=2.5)
    f1.fail_device("iobox0/gpu4")
    f1.drop_link("up:node3")
    # no close(): as if the process died
    f2 = EmulatedFabric(tmp_path / "f.db", cluster, scale=0.0)
    assert [(a.device, a.machine) for a in f2.attachments()] == [("iobox0/gpu0", "node0")]
    assert f2.failed_devices() == {"iobox0/gpu4"} and not f2.healthy("iobox0/gpu4")
    assert f2.down_links() == {"up:node3"}
    load = f2.link_load()
    assert load["up:node0"] == 2.5 and load["up:iobox0"] == 2.5
    assert load["up:node1"] == 0.0


def test_links_have_a_bandwidth_that_attachments_reserve_and_cannot_exceed(fabric: EmulatedFabric) -> None:
    # the testbed's links are 40 Gbit/s: node0 takes three GPUs at 12 Gbit/s each (36), not a fourth
    for i in range(3):
        fabric.attach(f"iobox0/gpu{i}", "node0", "pcie-over-ethernet", gbps=12.0)
    with pytest.raises(FabricError, match=r"link up:(node0|iobox0) carries 36 of its 40 Gbit/s") as exc:
        fabric.attach("iobox0/gpu3", "node0", "pcie-over-ethernet", gbps=12.0)
    assert not exc.value.retryable
    assert ("iobox0/gpu3", "node0") not in {(a.device, a.machine) for a in fabric.attachments()}
    fabric.attach("iobox0/gpu3", "node0", "pcie-over-ethernet", gbps=4.0)  # what is left fits exactly
    assert fabric.link_load()["up:node0"] == 40.0
    fabric.detach("iobox0/gpu0", "node0")  # a detach gives its bandwidth back
    assert fabric.link_load()["up:node0"] == 28.0 and fabric.link_load()["up:node1"] == 0.0
    fabric.attach("iobox1/nvme0", "node0", "pcie-over-ethernet", gbps=12.0)


def test_a_state_file_from_before_link_bandwidth_is_upgraded(tmp_path: Path) -> None:
    import sqlite3

    old = sqlite3.connect(tmp_path / "f.db")
    old.execute("CREATE TABLE attachments (device TEXT PRIMARY KEY, machine TEXT NOT NULL, "
                "mechanism TEXT NOT NULL, attached_at REAL NOT NULL)")
    old.execute("INSERT INTO attachments VALUES ('iobox0/gpu0', 'node0', 'pcie-over-ethernet', 0)")
    old.commit()
    old.close()
    f = EmulatedFabric(tmp_path / "f.db", load_cluster(DEFAULT_CLUSTER), scale=0.0)
    assert [(a.device, a.machine) for a in f.attachments()] == [("iobox0/gpu0", "node0")]
    assert f.link_load()["up:node0"] == 0.0
    f.attach("iobox0/gpu1", "node0", "pcie-over-ethernet", gbps=40.0)


def test_latencies_default_to_the_seed_testbed_and_scale() -> None:
    lat = OperationLatencies()
    assert lat.launch_machine > lat.attach_device > 0  # image download over GbE dominates (seed 000)
    fast = lat.scaled(0.01)
    assert fast.of("launch-machine") == pytest.approx(lat.launch_machine * 0.01)


def _spec(slice_id: str, command: list[str], machines: int = 1) -> SliceSpec:
    ms = tuple(SliceMachine(f"{slice_id}-m{i}", f"node{i}", 1, 1, (f"iobox0/gpu{2 * i}", f"iobox0/gpu{2 * i + 1}"))
               for i in range(machines))
    return SliceSpec(slice_id=slice_id, job_id="j-1", command=tuple(command), machines=ms, tasks=machines,
                     tenant="t")


def _engine(tmp_path: Path) -> LocalEngine:
    """The engine as `disagg serve` makes it (as root: jobs as `disagg-t`, in the session's test cgroups)."""
    return LocalEngine(tmp_path / "tasks", isolation=Isolation(allow_same_user=SAME_USER, cgroup_parent=TEST_CGROUP))


# the system's python: the tenant's user may not reach the test's own interpreter (e.g. under /root)
ENV_DUMP = ["python3", "-c", "import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
            "if k.startswith(('DISAGG', 'CUDA'))}))"]


def test_tasks_run_with_their_devices_and_the_hostfile(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    spec = _spec("s-1", ENV_DUMP, machines=2)
    for m in spec.machines:
        engine.launch_machine(spec, m)
    handle = engine.prepare_task(spec)
    assert engine.prepare_task(spec) == handle
    assert engine.status(handle).state == "held"
    engine.launch_task(handle)
    wait_for(lambda: engine.status(handle).state == "completed", what="the job to end")
    logs = engine.logs(handle)
    envs = [json.loads(line.split("] ", 1)[1]) for line in logs.splitlines() if "] {" in line]
    envs.sort(key=lambda e: e["DISAGG_TASK_INDEX"])
    assert [e["DISAGG_TASK_INDEX"] for e in envs] == ["0", "1"]
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert envs[1]["DISAGG_DEVICES"] == "iobox0/gpu2,iobox0/gpu3"
    hostfile = Path(envs[0]["DISAGG_HOSTFILE"]).read_text().splitlines()
    assert hostfile == ["s-1-m0 slots=1", "s-1-m1 slots=1"]


def test_a_repeated_launch_runs_the_job_once(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    spec = _spec("s-2", ["sh", "-c", "echo run >> marks"])  # in the job's working directory
    handle = engine.prepare_task(spec)
    marks = engine.workdir(handle) / "marks"
    for _ in range(3):
        engine.launch_task(handle)
    _engine(tmp_path).launch_task(handle)  # a restarted controller repeats it too
    wait_for(lambda: engine.status(handle).state == "completed", what="the job to end")
    assert marks.read_text() == "run\n"


def test_jobs_outlive_the_engine_object_and_cancel_stops_them(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    spec = _spec("s-3", ["sleep", "30"])
    handle = engine.prepare_task(spec)
    engine.launch_task(handle)
    wait_for(lambda: engine.status(handle).state == "running", what="the job to run")
    restarted = _engine(tmp_path)  # the controller came back: it finds the job running
    assert restarted.status(handle).state == "running"
    restarted.cancel(handle)
    restarted.cancel(handle)
    assert restarted.status(handle).state == "cancelled"


def test_a_cancel_before_launch_means_the_job_never_starts(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    handle = engine.prepare_task(_spec("s-4", ["sh", "-c", "echo run >> marks"]))
    marks = engine.workdir(handle) / "marks"
    engine.cancel(handle)
    engine.launch_task(handle)  # a late launch (a crash between the two) is refused by the claim
    assert engine.status(handle).state == "cancelled"
    assert not marks.exists()


def test_exit_codes_and_stderr_are_kept(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    handle = engine.prepare_task(_spec("s-5", ["sh", "-c", "echo out; echo oops >&2; exit 3"]))
    engine.launch_task(handle)
    wait_for(lambda: engine.status(handle).state == "failed", what="the job to fail")
    st = engine.status(handle)
    assert st.exit_code == 3
    assert "out" in engine.logs(handle) and "oops" in engine.logs(handle)
    assert engine.status("s-nope").state == "lost"


def test_the_exit_is_recorded_before_the_runner_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose every task ended is completed before the runner removes its groups (seconds on a loaded
    host): a fault's stop arriving then used to find no exit record, re-queue the job and run it again
    (a chaos soak saw a finished job run twice). The runner is run in this process, without cgroups or a
    sandbox, to look at its order."""
    from disagg.engines import local_runner

    engine = LocalEngine(tmp_path / "tasks", isolation=Isolation(
        allow_same_user=True, cgroup_parent=None, sandbox=False, allow_jobs_on_store_disk=True))
    handle = engine.prepare_task(_spec("s-9", ["true"]))
    seen: list[bool] = []
    monkeypatch.setattr(local_runner.Runner, "clean_up",
                        lambda self: seen.append(os.path.exists(os.path.join(self.d, "exit"))))
    assert local_runner.main([str(engine._dir(handle))]) == 0
    assert seen == [True]
    assert engine.status(handle).state == "completed"


def test_a_runner_caught_writing_its_claim_is_not_taken_for_dead(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner creates `started` empty and writes its pid into it a moment later. A status look that
    read it empty and then again with the pid called the live runner dead ("lost"): the loop tore its
    slice down, killed the job and ran it again on another slice (the kill -9 trials' "ran twice")."""
    engine = _engine(tmp_path)
    handle = engine.prepare_task(_spec("s-6", ["sleep", "30"]))
    engine.launch_task(handle)
    started = tmp_path / "tasks" / handle / "started"
    wait_for(lambda: started.exists() and '"pid"' in started.read_text(), what="the runner to claim the job")
    real_read = Path.read_text
    looks: list[Path] = []

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if self == started:
            looks.append(self)
            if len(looks) == 1:
                return ""  # the first look lands between the runner's create and its write
        return real_read(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    assert engine.status(handle).state == "running"
    assert looks
    monkeypatch.undo()
    assert engine.status(handle).state == "running"
    engine.cancel(handle)
    assert engine.status(handle).state == "cancelled"


def test_fabric_drivers_are_chosen_by_name_from_one_table(tmp_path: Path) -> None:
    from disagg.fabric.base import FabricDriver
    from disagg.fabric.emulated import EmulatedFabric, OperationLatencies
    from disagg.fabric.registry import DRIVERS, DriverOptions, UnknownDriverError, make_driver, register_driver
    from disagg.model import load_cluster

    cluster = load_cluster(Path(__file__).resolve().parents[2] / "src/disagg/control/default_cluster.yaml")
    opts = DriverOptions(cluster, tmp_path, OperationLatencies())
    fabric = make_driver("emulated", opts)
    assert isinstance(fabric, EmulatedFabric) and isinstance(fabric, FabricDriver)
    assert fabric.faults is fabric  # the emulated fabric can fail and repair parts on request
    fabric.close()
    with pytest.raises(UnknownDriverError, match=r"fabric\.driver: unknown driver 'nope'; known: emulated"):
        make_driver("nope", opts)
    with pytest.raises(UnknownDriverError, match=r"fabric\.url: unknown option for the 'emulated' driver"):
        make_driver("emulated", DriverOptions(cluster, tmp_path, OperationLatencies(), {"url": "https://x"}))
    with pytest.raises(ValueError, match="'emulated' is already registered"):
        register_driver("emulated", DRIVERS["emulated"])


def test_a_driver_without_fault_injection_refuses_an_operators_fail(tmp_path: Path) -> None:
    """Real hardware cannot be broken on request: fail/repair then answer a clear refusal, nothing changes."""
    from disagg.control.health import HealthMonitor, NoFaultInjection
    from disagg.fabric.emulated import EmulatedFabric

    class NoFaults(EmulatedFabric):
        name = "hardware"

        @property
        def faults(self) -> None:  # type: ignore[override]
            return None

    svc = make_service(tmp_path)
    try:
        monitor = HealthMonitor(svc.store, NoFaults(tmp_path / "f.db", svc.store.cluster()))
        with pytest.raises(NoFaultInjection, match="'hardware' fabric driver cannot fail or repair"):
            monitor.inject(lambda f: f.fail_device("iobox0/gpu0"))
        assert {d["id"]: d["state"] for d in svc.store.devices_view()}["iobox0/gpu0"] == "free"
    finally:
        svc.close()
