"""Device and link state after a fault: one derivation of what a down link cuts off, read by the policy's
snapshot and by every view; and finished work stays finished (issue 21, reproductions 1, 4 and 5)."""

from __future__ import annotations

from control_helpers import job, submit, wait_for, wait_state

from disagg.control.service import Service
from disagg.store.models import SliceRow


def _host(svc: Service, job_id: str) -> str:
    with svc.store.read() as s:
        row = s.get(SliceRow, job(svc, job_id)["slice"])
        assert row is not None
        return str(row.placement["machines"][0]["host"])


def test_a_job_cut_off_by_a_down_uplink_is_placed_elsewhere(service: Service) -> None:
    """Reproduction 1: a job runs on the one idle machine with a remote GPU; that machine's uplink fails.
    The job, sent back to the queue, must go to another machine (GPUs are reachable from them), not be
    offered the cut-off machine again round after round (the commit refusing it each time)."""
    blockers = [submit(service, gpu=0, cpus=8, command=["sleep", "60"]) for _ in range(3)]
    for b in blockers:
        wait_state(service, b, ("running",))
    hit = submit(service, gpu=1, cpus=1, command=["sleep", "60"])
    wait_state(service, hit, ("running",))
    host, first_slice = _host(service, hit), job(service, hit)["slice"]
    service.fabric.drop_link(f"up:{host}")
    try:
        wait_for(lambda: job(service, hit)["slice"] != first_slice, timeout=15,
                 what="the cut-off job to be placed again")
        again = wait_state(service, hit, ("composing", "running"), timeout=15)
        assert _host(service, hit) != host, again
    finally:
        seen = job(service, hit)
        service.fabric.restore_link(f"up:{host}")
        for j in [*blockers, hit]:
            service.jobs.cancel(j)
    assert "placement conflict" not in str(seen.get("reason")), seen


def test_a_job_that_ended_before_a_fault_is_not_run_again(service: Service) -> None:
    """Reproduction 5: the task exits 0 (the runner writes its exit record), then, before the loop polls,
    a link its slice uses drops. The slice is torn down, but the exit record decides the outcome: the
    job completes once, it is not re-queued and run a second time."""
    hit = submit(service, gpu=1, cpus=1, command=["sh", "-c", "sleep 0.3"])
    wait_state(service, hit, ("running",))
    first_slice = job(service, hit)["slice"]
    with service.store.read() as s:
        row = s.get(SliceRow, first_slice)
        assert row is not None
        handle = row.handle or first_slice
        pool = row.placement["machines"][0]["devices"][0].split("/")[0]
    service.controller.poll = lambda: None  # type: ignore[method-assign]  # the loop does not see the exit
    try:
        wait_for(lambda: service.engine.status(handle).state == "completed", what="the task's exit record")
        service.fabric.drop_link(f"up:{pool}")
        wait_for(lambda: _slice_state(service, first_slice) == "done", what="the cut-off slice to be torn down")
    finally:
        del service.controller.poll
        service.fabric.restore_link(f"up:{pool}")
    done = wait_state(service, hit, ("completed", "failed", "queued", "composing", "running"))
    assert done["state"] == "completed" and done["attempts"] == 1 and done["exit_code"] == 0, done
    assert [e for e in service.store.job_events(hit) if e["to"] == "queued" and e["from"] is not None] == []


def _slice_state(svc: Service, slice_id: str) -> str:
    with svc.store.read() as s:
        row = s.get(SliceRow, slice_id)
        assert row is not None
        return str(row.state)


def test_after_an_uplink_fails_every_view_says_what_it_cut_off(service: Service) -> None:
    """Reproduction 4: `links fail up:iobox1`. The NVMe drives behind it are not `free` in the devices
    view (nor counted free), iobox1 is unreachable in the machines view, and a job needing NVMe says the
    link is down, not only "0 free"."""
    service.jobs.set_link("up:iobox1", "fail")
    try:
        disk = submit(service, gpu=0, nvme=2, command=["true"])
        wait_for(lambda: job(service, disk)["wait_rounds"] > 0, what="a round to look at the NVMe job")
        waiting = job(service, disk)
        assert waiting["state"] == "queued" and "behind down link up:iobox1" in str(waiting["reason"]), waiting
        states = {d["id"]: d["state"] for d in service.store.devices_view()}
        assert {states[f"iobox1/nvme{i}"] for i in range(4)} == {"unreachable"}
        assert states["iobox0/gpu0"] == "free"
        assert service.store.counts()["devices"] == {"free": 5, "unreachable": 4}
        machines = {m["id"]: m["state"] for m in service.store.machines_view()}
        assert machines["iobox1"] == "unreachable" and machines["iobox0"] == "free"
    finally:
        service.jobs.set_link("up:iobox1", "repair")
    assert wait_state(service, disk, ("completed",))["state"] == "completed"
