"""The slice state machine and the scheduling loop on a live controller (SQLite, emulated testbed)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from control_helpers import job, submit, wait_for, wait_state
from sqlalchemy import select, update

from conftest import make_service
from disagg.control.service import Service
from disagg.placement.decisions import Decisions, DeviceGrant, JobPlacement, TaskPlacement
from disagg.store.models import DeviceRow, LinkRow, SliceRow, StepRow


def _steps(svc: Service, slice_id: str) -> list[StepRow]:
    with svc.store.read() as s:
        return list(s.scalars(select(StepRow).where(StepRow.slice_id == slice_id).order_by(StepRow.id)))


def _slice(svc: Service, slice_id: str) -> SliceRow:
    with svc.store.read() as s:
        row = s.get(SliceRow, slice_id)
        assert row is not None
        return row


def test_a_job_runs_through_all_six_operations_each_recorded_before_and_after(service: Service) -> None:
    j = submit(service, gpu=2, count=2, command=["sh", "-c", "echo task $DISAGG_TASK_INDEX on $DISAGG_DEVICES"])
    done = wait_state(service, j, ("completed", "failed"))
    assert done["state"] == "completed" and done["exit_code"] == 0 and done["attempts"] == 1
    wait_for(lambda: _slice(service, done["slice"]).state == "done", what="teardown")
    steps = _steps(service, done["slice"])
    ops = [st.op for st in steps]
    for op in ("attach-device", "launch-machine", "prepare-task", "launch-task", "stop-task", "detach-device",
               "destroy-machine"):
        assert op in ops
    assert ops.count("attach-device") == 4 and ops.count("launch-machine") == 2
    assert ops.count("detach-device") == 4 and ops.count("destroy-machine") == 2
    for st in steps:
        assert st.status == "done" and st.started_at is not None and st.ended_at is not None
        assert st.started_at <= st.ended_at
    assert _slice(service, done["slice"]).state == "done"
    assert service.fabric.attachments() == []
    assert "task 0" in service.jobs.logs(j) and "task 1" in service.jobs.logs(j)


def _overlap(steps: list[StepRow], op: str) -> bool:
    """The op's steps ran at the same time: from the first start to the last end took well under the
    sum of their durations (one after another, it would take at least the sum). Not "all started
    before the first ended": on a loaded machine a thread can start a step late, and that is no
    sign of serial execution."""
    chosen = [(st.started_at or 0.0, st.ended_at or 0.0) for st in steps if st.op == op]
    assert len(chosen) >= 2, (op, chosen)
    span = max(end for _, end in chosen) - min(start for start, _ in chosen)
    return span < 0.75 * sum(end - start for start, end in chosen)


def test_independent_steps_run_at_the_same_time(tmp_path: Path) -> None:
    svc = make_service(tmp_path, scale=0.05)  # attach 200 ms, launch-machine 1.5 s, destroy-machine 0.5 s
    svc.controller.start()
    try:
        j = submit(svc, gpu=1, count=4, cpus=1.0)
        done = wait_state(svc, j, ("completed", "failed"), timeout=30)
        wait_for(lambda: _slice(svc, done["slice"]).state == "done", what="teardown")
        steps = _steps(svc, done["slice"])
        assert _overlap(steps, "attach-device")
        assert _overlap(steps, "launch-machine")
        assert _overlap(steps, "destroy-machine")
    finally:
        svc.close()


def test_a_step_interrupted_by_a_crash_is_repeated_safely(tmp_path: Path) -> None:
    svc = make_service(tmp_path)  # the loop is not started: we drive it by hand
    try:
        j = submit(svc, gpu=1, command=["sh", "-c", "echo once"])
        svc.controller.schedule()
        slice_id = job(svc, j)["slice"]
        sl = _slice(svc, slice_id)
        machine = sl.placement["machines"][0]
        dev = machine["devices"][0]
        # the controller recorded the attach as started, the fabric attached, then it died
        with svc.store.write() as s:
            s.add(StepRow(slice_id=slice_id, op="attach-device", target=dev, status="started", tries=1))
        svc.fabric.attach(dev, machine["host"], "pcie-over-ethernet")
        svc.controller.slices.compose(slice_id)
        attach = next(st for st in _steps(svc, slice_id) if st.op == "attach-device")
        assert attach.status == "done" and attach.tries == 2
        assert job(svc, j)["state"] == "running"
        svc.controller.start()
        assert wait_state(svc, j, ("completed", "failed"))["state"] == "completed"
        assert svc.jobs.logs(j) == "once\n"
    finally:
        svc.close()


def test_a_failed_attach_compensates_only_what_started_and_requeues(service: Service) -> None:
    service.fabric.inject_attach_timeouts(3)  # every try of the first attach times out
    j = submit(service, gpu=1)
    done = wait_state(service, j, ("completed", "failed"))
    assert done["state"] == "completed" and done["attempts"] == 2
    with service.store.read() as s:
        first = s.scalars(select(SliceRow).where(SliceRow.job_id == j, SliceRow.attempt == 1)).one()
    steps = _steps(service, first.id)
    assert first.outcome == "requeue" and "timed out" in (first.detail or "")
    assert [st.op for st in steps if st.status == "failed"] == ["attach-device"]
    assert "launch-machine" not in [st.op for st in steps]  # never started, so never compensated
    assert "destroy-machine" not in [st.op for st in steps]


def test_the_jobs_own_retry_policy_decides_when_to_give_up(service: Service) -> None:
    service.fabric.inject_attach_timeouts(100)
    j, _ = service.jobs.submit("t", {**_body(), "max_retries": 0})
    done = wait_state(service, j["id"], ("completed", "failed"))
    assert done["state"] == "failed" and done["reason_code"] == "retries-exhausted"


def _body() -> dict[str, object]:
    from control_helpers import body

    return body()


def test_waiting_jobs_are_explained_and_their_wait_grows(service: Service) -> None:
    first = submit(service, gpu=4, gpu_model="P100", command=["sleep", "30"])
    wait_state(service, first, ("running",))
    second = submit(service, gpu=4, gpu_model="P100", command=["true"])
    wait_for(lambda: job(service, second)["wait_rounds"] >= 3, what="the wait counter to rise")
    waiting = job(service, second)
    assert waiting["state"] == "queued"
    assert waiting["reason"] and waiting["reason_code"] not in (None, "new")
    service.jobs.cancel(first)
    assert wait_state(service, second, ("completed",), timeout=30)["state"] == "completed"


def test_applying_decisions_rechecks_that_nothing_is_over_committed(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    try:
        a = submit(svc, gpu=1)
        b = submit(svc, gpu=1)
        grant = DeviceGrant("iobox0/gpu0", "gpu", True, "iobox0", ("up:iobox0", "up:node0"), 1.0)

        def placement(job_id: str) -> JobPlacement:
            return JobPlacement(job_id, (TaskPlacement(f"{job_id}/0", "node0", 1.0, 1.0, (grant,)),))

        stale = Decisions("test", placed=(placement(a), placement(b)))  # both got the same GPU
        assert len(svc.store.commit_placements(stale, [a, b]).placed) == 1
        assert job(svc, a)["state"] == "composing"
        loser = job(svc, b)
        assert loser["state"] == "queued" and loser["reason_code"] == "contention"
        assert "iobox0/gpu0 is already held" in loser["reason"]
        too_big = Decisions("test", placed=(JobPlacement(b, (TaskPlacement(f"{b}/0", "node0", 50.0, 1.0),)),))
        assert len(svc.store.commit_placements(too_big, [b]).placed) == 0
        assert "node0 has 9 cpus free" in job(svc, b)["reason"]
        # a's GPU takes 1 of up:iobox0's 40 Gbit/s; another GPU placed to draw 39.5 would over-commit it
        wide = DeviceGrant("iobox0/gpu1", "gpu", True, "iobox0", ("up:iobox0", "up:node1"), 39.5)
        greedy = Decisions("test", placed=(JobPlacement(b, (TaskPlacement(f"{b}/0", "node1", 1.0, 1.0, (wide,)),)),))
        assert len(svc.store.commit_placements(greedy, [b]).placed) == 0
        assert "link up:iobox0 has 39 Gbit/s left, the job needs 39.5" in job(svc, b)["reason"]
        fits = DeviceGrant("iobox0/gpu1", "gpu", True, "iobox0", ("up:iobox0", "up:node1"), 39.0)
        exact = Decisions("test", placed=(JobPlacement(b, (TaskPlacement(f"{b}/0", "node1", 1.0, 1.0, (fits,)),)),))
        assert len(svc.store.commit_placements(exact, [b]).placed) == 1
    finally:
        svc.close()


def _device_of(svc: Service, job_id: str) -> tuple[str, str]:
    sl = _slice(svc, job(svc, job_id)["slice"])
    m = sl.placement["machines"][0]
    return m["devices"][0], m["host"]


def test_a_failed_device_affects_only_the_slice_that_uses_it(service: Service) -> None:
    a = submit(service, gpu=1, cpus=6, command=["sleep", "30"])
    b = submit(service, gpu=1, cpus=6, command=["sleep", "30"])
    wait_state(service, a, ("running",))
    wait_state(service, b, ("running",))
    slice_b = job(service, b)["slice"]
    dev_a, _ = _device_of(service, a)
    slice_a = job(service, a)["slice"]
    service.jobs.set_device(dev_a, "fail")
    wait_for(lambda: _slice(service, slice_a).state == "done", what="the broken slice to be torn down")
    assert _slice(service, slice_a).outcome == "requeue"
    again = wait_state(service, a, ("running",))
    assert again["slice"] != slice_a and again["attempts"] == 2
    new_dev, _ = _device_of(service, a)
    assert new_dev != dev_a  # the failed device left the pool
    assert job(service, b)["slice"] == slice_b and _slice(service, slice_b).state == "running"
    with service.store.read() as s:
        row = s.get(DeviceRow, dev_a)
        assert row is not None and row.health == "failed" and row.slice_id is None
    service.jobs.set_device(dev_a, "repair")
    with service.store.read() as s:
        row = s.get(DeviceRow, dev_a)
        assert row is not None and row.health == "healthy"
    for j in (a, b):
        service.jobs.cancel(j)


def test_a_dropped_link_affects_only_the_slices_whose_path_crosses_it(service: Service) -> None:
    a = submit(service, gpu=1, cpus=6, command=["sleep", "30"])
    b = submit(service, gpu=1, cpus=6, command=["sleep", "30"])
    wait_state(service, a, ("running",))
    wait_state(service, b, ("running",))
    _, host_a = _device_of(service, a)
    _, host_b = _device_of(service, b)
    assert host_a != host_b  # 6 of 10 cpus each: two machines
    slice_a, slice_b = job(service, a)["slice"], job(service, b)["slice"]
    service.fabric.drop_link(f"up:{host_a}")
    wait_for(lambda: _slice(service, slice_a).state == "done", what="the cut-off slice to be torn down")
    assert "dropped" in (_slice(service, slice_a).detail or "")
    assert _slice(service, slice_b).state == "running"
    service.fabric.restore_link(f"up:{host_a}")
    assert wait_state(service, a, ("running",))["slice"] != slice_a
    for j in (a, b):
        service.jobs.cancel(j)


def test_cancel_tears_the_slice_down_and_stops_the_job(service: Service) -> None:
    j = submit(service, gpu=2, command=["sleep", "30"])
    wait_state(service, j, ("running",))
    slice_id = job(service, j)["slice"]
    service.jobs.cancel(j)  # answers nothing since a cancel may wait a grace period (issue 25)
    assert job(service, j)["state"] == "cancelled"
    wait_for(lambda: _slice(service, slice_id).state == "done", what="teardown")
    assert service.engine.status(slice_id).state == "cancelled"
    assert service.fabric.attachments() == []
    assert job(service, j)["state"] == "cancelled"


def test_a_drained_device_gets_no_new_slice(service: Service) -> None:
    for i in range(5):
        if i != 4:
            service.jobs.set_device(f"iobox0/gpu{i}", "drain")
    j = submit(service, gpu=1)
    assert wait_state(service, j, ("completed",))["state"] == "completed"
    with service.store.read() as s:
        sl = s.scalars(select(SliceRow).where(SliceRow.job_id == j)).one()
    assert sl.placement["machines"][0]["devices"] == ["iobox0/gpu4"]
    with service.store.write() as s:
        s.execute(update(DeviceRow).values(drained=False))


def test_a_gang_job_runs_end_to_end_on_each_store(db_url: str, tmp_path: Path) -> None:
    """The whole controller on SQLite and on a real PostgreSQL (placement, slices, teardown)."""
    svc = make_service(tmp_path, db=db_url)
    svc.controller.start()
    try:
        jobs = [submit(svc, gpu=1, count=2, command=["sh", "-c", "echo rank $DISAGG_TASK_INDEX"]) for _ in range(3)]
        for j in jobs:
            done = wait_state(svc, j, ("completed", "failed"), timeout=30)
            assert done["state"] == "completed"
            wait_for(lambda done=done: _slice(svc, done["slice"]).state == "done", what="teardown")
            assert "rank 0" in svc.jobs.logs(j) and "rank 1" in svc.jobs.logs(j)
        assert svc.fabric.attachments() == []
        assert svc.store.counts()["devices"] == {"free": 9}
    finally:
        svc.close()


@pytest.mark.parametrize("look", [1, 2])
@pytest.mark.parametrize("what", ["link", "device"])
def test_a_repair_is_not_undone_by_a_look_at_the_fabric_taken_before_it(
    what: str, look: int, db_url: str, tmp_path: Path
) -> None:
    """The monitor reads the fabric (the link down, the device failed), then an admin repairs it before
    the monitor wrote what it saw: the repair must stand. The monitor looks twice when something
    changed (a quick look, then again inside the transaction that writes); it is held after each."""
    svc = make_service(tmp_path, db=db_url)  # the loop is not started: the race is driven by hand
    target = "up:iobox0" if what == "link" else "iobox0/gpu1"
    fabric = svc.fabric
    read = fabric.down_links if what == "link" else fabric.failed_devices
    looked, resume = threading.Event(), threading.Event()
    looks: list[int] = []

    def slow_read() -> set[str]:
        out = read()
        if threading.current_thread().name == "monitor":
            looks.append(1)
            if len(looks) == look:
                looked.set()
                resume.wait(5)  # the monitor has seen the fault and not written it yet
        return out

    try:
        (fabric.drop_link if what == "link" else fabric.fail_device)(target)  # a fault the monitor finds
        setattr(fabric, "down_links" if what == "link" else "failed_devices", slow_read)
        monitor = threading.Thread(target=svc.controller.monitor, name="monitor")
        monitor.start()
        assert looked.wait(5)
        answers: list[dict[str, object] | None] = []
        repair = threading.Thread(target=lambda: answers.append(
            (svc.jobs.set_link if what == "link" else svc.jobs.set_device)(target, "repair")))
        repair.start()
        repair.join(0.5)   # the repair either finishes now (and the stale look is written after it) or waits
        resume.set()
        monitor.join(10)
        repair.join(10)
        assert not monitor.is_alive() and not repair.is_alive()
        with svc.store.read() as s:
            if what == "link":
                link = s.get(LinkRow, target)
                assert link is not None and link.up
                assert answers and answers[0] is not None and answers[0]["state"] == "up"
            else:
                dev = s.get(DeviceRow, target)
                assert dev is not None and dev.health == "healthy"
        svc.controller.monitor()   # and the next look agrees
        assert {lk["id"]: lk["state"] for lk in svc.store.links_view()}["up:iobox0"] == "up"
        assert {d["id"]: d["health"] for d in svc.store.devices_view()}["iobox0/gpu1"] == "healthy"
    finally:
        svc.close()


def test_the_dashboard_summarises_a_large_inventory(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its size limit the fabric page shows racks with counts by state and lists only the
    devices an operator must look at; the counts agree with the store's own."""
    from fastapi.testclient import TestClient

    from disagg.api import create_app
    from disagg.api.dashboard import fabric

    j = submit(service, gpu=1, cpus=2, command=["sleep", "30"])
    wait_state(service, j, ("running",))
    used, _ = _device_of(service, j)
    drained = next(f"iobox0/gpu{i}" for i in range(5) if f"iobox0/gpu{i}" != used)
    service.jobs.set_device(drained, "drain")
    service.jobs.set_device("iobox1/nvme2", "fail")
    client = TestClient(create_app(service.jobs))
    client.post("/login", data={"token": service.store.create_token("ops", admin=True)})
    try:
        small = client.get("/ui/fabric").text
        assert 'data-device="iobox0/gpu0"' in small and 'data-node="node3"' in small and "Racks (" not in small
        monkeypatch.setattr(fabric, "FULL_NODES", 2)
        page = client.get("/ui/fabric").text
        counts = service.store.counts()["devices"]
        assert "Racks (1)" in page
        # the rack's row: 4 machines, 2 pools, devices free/attached/drained/unreachable/failed
        row = '<tr><td>r0</td><td class="num">4</td><td class="num">2</td>' + "".join(
            f'<td class="num {st}">{counts.get(st, 0)}</td>'
            for st in ("free", "attached", "drained", "unreachable", "failed"))
        assert row in page
        assert counts["attached"] == 1 and counts["drained"] == 1 and counts["failed"] == 1
        # only the drained and the failed device are listed; no card per node
        assert drained in page and "iobox1/nvme2" in page and 'data-node="node3"' not in page
        assert [f"iobox0/gpu{i}" for i in range(5) if f"iobox0/gpu{i}" in page] == [drained]
    finally:
        service.jobs.cancel(j)
