"""The event kernel: order by time, then priority, then scheduling order; lazy cancel."""

from __future__ import annotations

import pytest

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
