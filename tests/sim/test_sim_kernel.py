"""The event kernel: order by time, then priority, then scheduling order; lazy cancel."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disagg.sim.kernel import Kernel, Priority


def drain(k: Kernel[str]) -> list[tuple[float, str]]:
    out = []
    while (item := k.pop()) is not None:
        out.append((item.time, item.event))
    return out


def test_events_pop_by_time_then_priority_then_seq() -> None:
    k: Kernel[str] = Kernel()
    k.schedule(5.0, Priority.ROUND, "round@5")
    k.schedule(5.0, Priority.ARRIVAL, "arrive@5-a")
    k.schedule(1.0, Priority.ROUND, "round@1")
    k.schedule(5.0, Priority.FINISH, "finish@5")
    k.schedule(5.0, Priority.ARRIVAL, "arrive@5-b")
    assert [e for _, e in drain(k)] == ["round@1", "finish@5", "arrive@5-a", "arrive@5-b", "round@5"]
    assert k.now == 5.0


def test_cancel_skips_the_event_and_is_idempotent() -> None:
    k: Kernel[str] = Kernel()
    keep = k.schedule(2.0, Priority.FINISH, "keep")
    gone = k.schedule(1.0, Priority.FINISH, "gone")
    k.cancel(gone)
    k.cancel(gone)
    assert len(k) == 1
    assert drain(k) == [(2.0, "keep")]
    k.cancel(keep)  # already fired: harmless
    assert k.pop() is None


def test_compaction_keeps_only_live_events() -> None:
    k: Kernel[int] = Kernel()
    seqs = [k.schedule(float(i), Priority.FINISH, i) for i in range(500)]
    for s in seqs[::2]:
        k.cancel(s)
    assert len(k) == 250
    assert len(k._heap) < 500  # compacted: memory follows what is pending, not what was ever scheduled
    assert [e for _, e in drain(k)] == list(range(1, 500, 2))


def test_cannot_schedule_in_the_past() -> None:
    k: Kernel[str] = Kernel()
    k.schedule(3.0, Priority.ROUND, "x")
    k.pop()
    with pytest.raises(ValueError, match="before now"):
        k.schedule(2.0, Priority.ROUND, "y")


def test_reschedule_many_is_cancel_then_schedule_in_order() -> None:
    """The re-planner's one call: each old event is dropped, the new ones take the next seqs in the
    order given (so they pop after events scheduled earlier at the same time and priority), and -1
    cancels nothing."""
    a: Kernel[str] = Kernel()
    b: Kernel[str] = Kernel()
    for k in (a, b):
        k.schedule(4.0, Priority.FINISH, "other")
    old_a, old_b = a.schedule(9.0, Priority.FINISH, "old"), b.schedule(9.0, Priority.FINISH, "old")
    new_a = a.reschedule_many([(old_a, 4.0, "new"), (-1, 6.0, "first"), (-1, 4.0, "last")], Priority.FINISH)
    b.cancel(old_b)
    new_b = [b.schedule(4.0, Priority.FINISH, "new"), b.schedule(6.0, Priority.FINISH, "first"),
             b.schedule(4.0, Priority.FINISH, "last")]
    assert list(new_a) == new_b
    assert a.reschedule_many([], Priority.FINISH) == range(a._seq, a._seq)
    assert drain(a) == drain(b) == [(4.0, "other"), (4.0, "new"), (4.0, "last"), (6.0, "first")]
    with pytest.raises(ValueError, match="before now"):
        a.reschedule_many([(-1, 1.0, "late")], Priority.FINISH)


def test_reschedule_many_compacts_like_cancel() -> None:
    """Moving each of 100 events five times leaves 100 pending, not 600 heap entries."""
    k: Kernel[int] = Kernel()
    seqs = [k.schedule(float(i), Priority.FINISH, i) for i in range(100)]
    for move in range(1, 6):
        seqs = list(k.reschedule_many([(s, 1000.0 * move + i, i) for i, s in enumerate(seqs)], Priority.FINISH))
    assert len(k) == 100
    assert len(k._heap) < 600
    assert [e for _, e in drain(k)] == list(range(100))


def test_a_batch_moves_events_as_reschedule_many_does() -> None:
    """`batch`/`settle` (what `_reevaluate` pushes through): the same heap, seqs and compaction as
    `reschedule_many` given the same moves."""
    a: Kernel[int] = Kernel()
    b: Kernel[int] = Kernel()
    seqs = [[k.schedule(float(i), Priority.FINISH, i) for i in range(100)] for k in (a, b)]
    for move in range(1, 6):
        seqs[0] = list(a.reschedule_many([(s, 1000.0 * move + i, i) for i, s in enumerate(seqs[0])],
                                         Priority.FINISH))
        heap, dead, seq = b.batch()
        moved = []
        for i, old in enumerate(seqs[1]):
            dead.add(old)
            heapq.heappush(heap, (1000.0 * move + i, int(Priority.FINISH), seq, i))
            moved.append(seq)
            seq += 1
        b.settle(seq)
        seqs[1] = moved
        assert seqs[0] == seqs[1] and sorted(a._heap) == sorted(b._heap) and a._dead == b._dead
    assert drain(a) == drain(b)


class _Owner:
    """What `Replanning._reevaluate` keeps per run for `Kernel.deferrals` (a `kernel.Deferred`)."""

    def __init__(self) -> None:
        self.finish_at, self.finish_seq, self.entry_at, self.entry_seq = 0.0, -1, 0.0, -1


def _move(k: Kernel[int], owner: _Owner, at: float, event: int) -> None:
    """Schedule or move `owner`'s event to `at` the way `_reevaluate` does: a later key leaves the
    entry standing in for it, an earlier one kills the entry and pushes."""
    heap, dead, seq = k.batch()
    deferred = k.deferrals()
    was = owner.finish_seq
    owner.finish_at, owner.finish_seq = at, seq
    if was >= 0:
        entry = owner.entry_seq
        if at >= owner.entry_at:
            deferred[entry] = owner  # type: ignore[assignment]
            k.settle(seq + 1)
            return
        dead.add(entry)
        if entry != was:
            del deferred[entry]
    heapq.heappush(heap, (at, int(Priority.FINISH), seq, event))
    owner.entry_at, owner.entry_seq = at, seq
    k.settle(seq + 1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["move", "pop", "cancel", "other", "peek"]), st.integers(0, 7),
                          st.integers(0, 40)), max_size=120))
def test_deferred_moves_pop_as_pushed_moves_do(ops: list[tuple[str, int, int]]) -> None:
    """Events moved later through `deferrals` (their old entry standing in for them) pop in the order,
    at the times and with the seqs they have when every move is a cancel and a push (`reschedule_many`),
    whatever the mix of moves later and earlier, other events at equal times, pops, peeks and cancels."""
    plain: Kernel[int] = Kernel()
    lazy: Kernel[int] = Kernel()
    seqs: dict[int, int] = {}
    owners: dict[int, _Owner] = {}
    for op, who, t in ops:
        at = plain.now + t / 4  # coarse times: ties between events are common
        if op == "move":
            moved = plain.reschedule_many([(seqs.get(who, -1), at, who)], Priority.FINISH)
            seqs[who] = moved[0]
            _move(lazy, owners.setdefault(who, _Owner()), at, who)
            assert owners[who].finish_seq == seqs[who]
        elif op == "other":
            assert plain.schedule(at, Priority.FINISH, 100 + who) == lazy.schedule(at, Priority.FINISH, 100 + who)
        elif op == "cancel" and who in seqs:
            plain.cancel(seqs.pop(who))
            lazy.cancel(owners.pop(who).entry_seq)
        elif op == "peek":
            assert plain.peek_time() == lazy.peek_time()
        elif op == "pop":
            a, b = plain.pop(), lazy.pop()
            assert a == b and plain.now == lazy.now and plain.popped == lazy.popped
            if a is not None and a.event < 100:
                assert owners[a.event].entry_seq == a.seq == seqs[a.event]
                del seqs[a.event], owners[a.event]
        assert len(plain) == len(lazy)
    while (a := plain.pop()) is not None:
        assert a == lazy.pop()
    assert lazy.pop() is None and not lazy.deferrals()
