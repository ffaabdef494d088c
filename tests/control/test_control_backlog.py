"""The slices a worker takes from the last read (`control.backlog`) are those a read made now would give
it, and the dispatch reads the store only when the backlog cannot tell."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest
from control_helpers import make_service, submit
from hypothesis import given, settings
from hypothesis import strategies as st

from disagg.control.backlog import SliceBacklog
from disagg.control.slice import fair_pick
from disagg.model.states import SliceState

Waiting = tuple[str, SliceState, str]


def _oldest(whole: list[Waiting], per_tenant: int) -> list[Waiting]:
    """What `slices_to_work(per_tenant)` returns: each tenant's oldest `per_tenant`, oldest first."""
    seen: Counter[str] = Counter()
    out = []
    for w in whole:
        seen[w[2]] += 1
        if seen[w[2]] <= per_tenant:
            out.append(w)
    return out


@settings(max_examples=200, deadline=None)
@given(tenants=st.lists(st.sampled_from("abcd"), min_size=1, max_size=60),
       workers=st.integers(1, 4), finishes=st.lists(st.integers(0, 3), min_size=1, max_size=40))
def test_what_the_backlog_hands_out_is_what_a_read_now_would_hand_out(tenants: list[str], workers: int,
                                                                      finishes: list[int]) -> None:
    """Workers finish one by one (the slice they finish leaves the store); each pick from the backlog, or
    the read it asks for, hands out what `fair_pick` of the whole store's waiting slices would."""
    whole: list[Waiting] = [(f"s{k:03}", SliceState.COMPOSING, t) for k, t in enumerate(tenants)]
    per_tenant = 2 * workers + 1
    backlog, reads = SliceBacklog(fresh_s=10.0), 0
    inflight: dict[str, str] = {}

    def dispatch(now: float) -> None:
        nonlocal reads
        free = workers - len(inflight)
        if free <= 0:
            return
        waiting = [w for w in whole if w[0] not in inflight]
        expected = fair_pick(waiting, Counter(inflight.values()), free)
        chosen = backlog.pick(now, inflight, set(), free)
        if chosen is None:  # a read, as `Controller._dispatch_once` makes it
            reads += 1
            read = [w for w in _oldest(whole, per_tenant) if w[0] not in inflight]
            chosen = fair_pick(read, Counter(inflight.values()), free)
            inflight.update((s, t) for s, _, t in chosen)
            backlog.refill(_oldest(whole, per_tenant), now, per_tenant, set(inflight))
        else:
            inflight.update((s, t) for s, _, t in chosen)
        assert chosen == expected

    dispatch(0.0)
    for step, k in enumerate(finishes, start=1):
        if not inflight:
            break
        done = sorted(inflight)[k % len(inflight)]
        del inflight[done]
        whole = [w for w in whole if w[0] != done]
        dispatch(float(step))
    assert reads >= 1


def test_a_backlog_serves_only_while_fresh_and_a_skipped_slice_waits_for_the_next_read() -> None:
    read: list[Waiting] = [(f"s{k}", SliceState.COMPOSING, "alice") for k in range(5)]
    backlog = SliceBacklog(fresh_s=0.5)
    assert backlog.pick(0.0, {}, set(), 1) is None  # nothing read yet
    backlog.refill(read, 10.0, 33, gone={"s0"})
    assert backlog.pick(10.6, {}, set(), 1) is None  # too old: a read
    backlog.refill(read, 11.0, 33, gone={"s0"})
    assert backlog.pick(11.1, {}, {"s1"}, 1) == [read[2]]  # s1 was left by a worker: not handed again
    assert backlog.pick(11.2, {}, set(), 5) == [read[3], read[4]]  # s1 is gone from the backlog
    assert backlog.pick(11.3, {}, set(), 1) is None  # all taken: a read
    backlog.refill(read[:3], 12.0, 3, gone=set())  # cut at 3 of alice's: more may wait in the store
    assert backlog.pick(12.1, {}, set(), 2) == read[:2]
    assert backlog.pick(12.2, {}, set(), 2) is None  # one left of a tenant cut short, two free: a read
    backlog.refill(read, 13.0, 33, gone=set())
    backlog.forget()
    assert backlog.pick(13.0, {}, set(), 1) is None


def test_a_worker_that_finishes_takes_the_next_slice_without_a_read(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    svc = make_service(tmp_path, workers=2)  # no loop: the round's slices stay composing
    try:
        for _ in range(6):
            submit(svc, "alice", gpu=0, cpus=0.1, memory_gb=0.1)
        svc.controller.schedule()
        waiting = svc.store.slices_to_work()
        assert len(waiting) == 6
        real, reads = svc.store.slices_to_work, []

        def counted(per_tenant: int | None = None) -> list[Waiting]:
            reads.append(per_tenant)
            return real(per_tenant=per_tenant)

        monkeypatch.setattr(svc.store, "slices_to_work", counted)
        handed: list[str] = []
        lock = threading.Lock()

        def hand(fn: object, slice_id: str, state: SliceState) -> None:
            with lock:
                handed.append(slice_id)

        monkeypatch.setattr(svc.controller._pool, "submit", hand)
        ctl = svc.controller
        ctl.dispatch()
        assert len(reads) == 1 and handed == [w[0] for w in waiting[:2]]
        for k in range(2):  # each worker finishes its slice (which leaves the store's waiting list)
            with ctl._lock:
                ctl._inflight.pop(handed[k])
            ctl.dispatch(worker=True)
        assert len(reads) == 1 and handed == [w[0] for w in waiting[:4]]  # from the backlog
        ctl._backlog.forget()  # as when it grows old
        with ctl._lock:
            ctl._inflight.pop(handed[2])
        ctl.dispatch(worker=True)
        assert len(reads) == 2 and len(handed) == 5  # a read: (the store still lists the slices the test
        assert handed[4] not in handed[2:4]  # "finished" as composing) neither the left one nor one in hand
    finally:
        svc.close()
