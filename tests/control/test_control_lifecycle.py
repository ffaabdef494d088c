"""One owner for job and slice states: the transition tables, the guarded moves, their events, and the
plan / commit split with its refresh path."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from control_helpers import job, submit, wait_for, wait_state

from conftest import make_service
from disagg.control.service import Service
from disagg.model.states import (
    JOB_TRANSITIONS,
    SLICE_TRANSITIONS,
    IllegalTransition,
    JobState,
    SliceState,
    check_job_move,
    check_slice_move,
)
from disagg.placement.decisions import Decisions, DeviceGrant, JobPlacement, TaskPlacement
from disagg.store.lifecycle import move_job


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(JobState, JobState)),
                         ids=lambda s: str(s))
def test_the_job_table_allows_exactly_its_moves(src: JobState, dst: JobState) -> None:
    if src is dst or dst in JOB_TRANSITIONS[src]:
        check_job_move("j", src, dst)
    else:
        with pytest.raises(IllegalTransition, match=f"job j: {src} → {dst} is not an allowed transition"):
            check_job_move("j", src, dst)


def test_final_job_states_go_nowhere_and_every_slice_ends_done() -> None:
    for final in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED):
        assert JOB_TRANSITIONS[final] == frozenset() and final.final
    # every slice state reaches done, and done is the end
    for start in SliceState:
        seen, todo = {start}, [start]
        while todo:
            for nxt in SLICE_TRANSITIONS[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert SliceState.DONE in seen
    with pytest.raises(IllegalTransition, match="slice s: done → composing"):
        check_slice_move("s", SliceState.DONE, SliceState.COMPOSING)


def test_an_illegal_move_writes_nothing_and_a_lost_race_is_no_move(service: Service) -> None:
    service.controller.stop()  # no round may place the job between the looks below (a fast round did)
    j = submit(service, gpu=1)
    with service.store.write_core() as conn, pytest.raises(IllegalTransition, match="queued → running"):
        move_job(conn, j, JobState.RUNNING, "skipping composing", (JobState.QUEUED,), 0.0)
    with service.store.write_core() as conn:
        # the caller expects a running job; it is queued: no move, no event
        assert move_job(conn, j, JobState.COMPLETED, "done", (JobState.RUNNING,), 0.0) is None
    assert job(service, j)["state"] == "queued"
    assert [(e["from"], e["to"]) for e in service.store.job_events(j)] == [(None, "queued")]


def test_every_transition_of_a_job_is_an_event_with_why(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    svc.controller.start()
    try:
        j = submit(svc, gpu=1, command=["sh", "-c", "exit 0"])
        done = wait_state(svc, j, ("completed",))
        wait_for(lambda: any(e["to"] == "done" for e in svc.store.job_events(j)), what="the slice's teardown")
        events = svc.store.job_events(j)
        jobs = [(e["from"], e["to"]) for e in events if e["subject"] == "job"]
        assert jobs == [(None, "queued"), ("queued", "composing"), ("composing", "running"),
                        ("running", "completed")]
        slices = [(e["from"], e["to"]) for e in events if e["subject"] == "slice"]
        assert slices == [(None, "composing"), ("composing", "running"), ("running", "tearing-down"),
                          ("tearing-down", "done")]
        assert events[0]["why"] == "submitted"
        placed = next(e for e in events if e["to"] == "composing" and e["subject"] == "job")
        assert placed["why"] == f"placed on slice {done['slice']}" and placed["slice"] == done["slice"]
        assert next(e for e in events if e["to"] == "completed")["why"] == "exit code 0"
        assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    finally:
        svc.close()


def test_a_failed_device_shows_as_a_requeue_event_naming_it(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    svc.controller.start()
    try:
        j = submit(svc, gpu=1, command=["sleep", "30"])
        running = wait_state(svc, j, ("running",))
        device = svc.store.load_slice(running["slice"]).placement.tasks[0].devices[0].id
        svc.jobs.set_device(device, "fail")
        wait_for(lambda: any(e["to"] == "queued" and e["from"] is not None for e in svc.store.job_events(j)),
                 what="the re-queue event")
        requeued = next(e for e in svc.store.job_events(j) if e["to"] == "queued" and e["from"] is not None)
        assert requeued["why"] == f"re-queued: device {device} failed"
        aborted = next(e for e in svc.store.job_events(j) if e["to"] == "tearing-down")
        assert aborted["why"] == f"device {device} failed" and aborted["slice"] == running["slice"]
    finally:
        svc.close()


def test_a_conflict_at_commit_refreshes_the_snapshot_and_plans_again(tmp_path: Path) -> None:
    """Between the plan and its commit another writer takes the device the plan gave the job: the commit
    refuses that placement, the loop re-plans it on a fresh snapshot in the same round and says so."""
    svc = make_service(tmp_path)
    try:
        j = submit(svc, gpu=1, gpu_model="P100")
        thief = submit(svc, gpu=1, name="thief")
        commit = svc.store.commit_placements
        stolen: list[str] = []

        def commit_after_a_thief(plan: Decisions, considered: list[str], count_wait: bool = True):  # type: ignore[no-untyped-def]
            if not stolen:
                granted = next(p for p in plan.placed if p.job == j).tasks[0].devices[0]
                stolen.append(granted.id)
                grab = DeviceGrant(granted.id, "gpu", granted.remote, granted.location, granted.path, 0.0)
                take = JobPlacement(thief, (TaskPlacement(f"{thief}/0", "node3", 1.0, 1.0, (grab,)),))
                assert len(commit(Decisions("other", placed=(take,)), [thief]).placed) == 1
                plan = Decisions(plan.policy, tuple(p for p in plan.placed if p.job != thief), plan.unplaced)
            return commit(plan, considered, count_wait)

        svc.store.commit_placements = commit_after_a_thief  # type: ignore[method-assign]
        svc.controller.schedule()
        assert svc.controller.last_round["replans"] == 1
        placed = job(svc, j)
        assert placed["state"] == "composing"
        got = svc.store.load_slice(placed["slice"]).placement.tasks[0].devices[0].id
        assert got != stolen[0]
        assert svc.controller.metrics.replans._value.get() == 1
    finally:
        svc.close()


def test_a_composition_goes_composing_composed_tearing_down_done_and_never_running(service: Service) -> None:
    """A slice with no job (a Redfish client's system): composed until its owner decomposes it."""
    assert SLICE_TRANSITIONS[SliceState.COMPOSING] >= {SliceState.COMPOSED}
    assert SLICE_TRANSITIONS[SliceState.COMPOSED] == frozenset({SliceState.TEARING_DOWN, SliceState.COMPOSING})
    with pytest.raises(IllegalTransition, match="slice s: composed → running"):
        check_slice_move("s", SliceState.COMPOSED, SliceState.RUNNING)
    sid = service.store.compose("alice", "mine", "node0", ["iobox0/gpu0"], cpus=2.0)
    service.controller.wake()
    wait_for(lambda: service.store.any_slice(sid).state == SliceState.COMPOSED,  # type: ignore[union-attr]
             what="the composition")
    assert [(a.device, a.machine) for a in service.fabric.attachments()] == [("iobox0/gpu0", "node0")]
    assert service.store.held_devices() == {"iobox0/gpu0": sid}
    assert service.store.decompose(sid, "decomposed by its owner")
    wait_for(lambda: service.store.any_slice(sid).state == SliceState.DONE,  # type: ignore[union-attr]
             what="the decomposition")
    assert service.fabric.attachments() == [] and service.store.held_devices() == {}
    assert not service.store.decompose(sid)  # gone: nothing to decompose
