"""A tiny discrete-event kernel: a heap of `(time, priority, seq, event)`.

Why so small: the simulator needs exactly three things — events ordered by simulated time, a fixed
order among events that fall at the same instant (completions before arrivals before a scheduling
round, so a round sees everything that happened at its instant), and a tie-breaker that makes every
run with the same seed replay identically. `seq` is that tie-breaker: it grows with every
`schedule` call, so two events at the same time and priority pop in the order they were scheduled.

Cancelling is lazy: `cancel(seq)` marks an entry dead and `pop` skips it. The heap is compacted when
dead entries outnumber live ones, so memory stays proportional to what is pending.

Moving an event later needs no new entry either (`Deferred`, `deferrals`): its entry in the heap, whose
key is smaller than the event's new one, stands in for it, and `pop` pushes the true key when that
entry comes up, before anything with a greater key can pop. Re-planning moves most finish events later
than their entry (some 84,000 of the 98,000 moves on paper-128m-4096j): each would otherwise be a push,
a dead entry and its share of the compactions.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Generic, Protocol, TypeVar

E = TypeVar("E")


class Priority(IntEnum):
    """Order of events at the same instant: lower runs first."""

    FINISH = 0      # a job's tasks complete and free what they held
    FAILURE = 1     # a device fails or is repaired
    ARRIVAL = 2     # a job enters the queue
    ROUND = 3       # the scheduler runs on everything above


@dataclass(frozen=True, slots=True)
class Scheduled(Generic[E]):
    """An event that has popped: when it fires and what it is."""

    time: float
    priority: int
    seq: int
    event: E


class Deferred(Protocol):
    """A pending event whose heap entry may stand in for it (`Kernel.deferrals`): its true key is
    `(finish_at, priority, finish_seq)`, its entry's `(entry_at, priority, entry_seq)`, never greater.
    Whoever defers keeps both; `pop` sets the entry to the true key when it pushes that."""

    finish_at: float
    finish_seq: int
    entry_at: float
    entry_seq: int


class Kernel(Generic[E]):
    """The event heap and the simulated clock. `now` only moves forward, and only in `pop`."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._heap: list[tuple[float, int, int, E]] = []
        self._seq = 0
        self._dead: set[int] = set()
        #: Per entry standing in for a later key, the event's owner (who knows that key).
        self._deferred: dict[int, Deferred] = {}
        self.popped = 0

    def __len__(self) -> int:
        """How many live events are pending."""
        return len(self._heap) - len(self._dead)

    def schedule(self, time: float, priority: int, event: E) -> int:
        """Put `event` on the heap at `time`; returns its seq (the handle for `cancel`).

        Scheduling in the past is a bug in the caller, so it raises rather than reorder history.
        """
        if time < self.now:
            raise ValueError(f"cannot schedule at t={time} before now={self.now}")
        seq = self._seq
        self._seq += 1
        heapq.heappush(self._heap, (time, int(priority), seq, event))
        return seq

    def reschedule_many(self, moves: Sequence[tuple[int, float, E]], priority: int) -> range:
        """Per `(seq, time, event)` in order: `cancel(seq)` (when seq >= 0), then `schedule(time,
        priority, event)`; returns the new seqs: one call for many moves rather than two per event.
        (Re-planning, which moves some 100,000 finish events a run, spells it out: `batch`.)"""
        now, dead, heap = self.now, self._dead, self._heap
        first = self._seq
        p = int(priority)
        for seq, (old, time, event) in enumerate(moves, first):
            if time < now:
                self._seq = seq  # those before it stay moved
                raise ValueError(f"cannot schedule at t={time} before now={now}")
            if 0 <= old < first:
                dead.add(old)
            heapq.heappush(heap, (time, p, seq, event))
        self._seq = first + len(moves)
        self._compact_if_due()
        return range(first, self._seq)

    def batch(self) -> tuple[list[tuple[float, int, int, E]], set[int], int]:
        """The heap, the cancelled seqs and the next seq, for a caller that moves many events in a loop
        of its own (re-planning moves some 100,000 finish events a run: `Replanning._reevaluate`),
        without the tuple per move that `reschedule_many` builds and unpacks. Per move, as
        `reschedule_many` does: add the old seq (one handed out before) to the set, push `(time,
        int(priority), seq, event)` with `time >= now` and seqs counting up from the one returned; then
        `settle(next_seq)` before anything else uses the kernel."""
        return self._heap, self._dead, self._seq

    def deferrals(self) -> dict[int, Deferred]:
        """The entries that stand in for an event moved later, by their seq, for a `batch` caller that
        moves events later without a push: there, having taken the next seq for the event's new key
        (which must be greater than its entry's, the seq making it so at an equal time), it sets the
        owner's `finish_at` and `finish_seq` to that key and maps the entry's seq to the owner. `pop`
        pushes the true key (with the entry's priority and event) when the entry comes up, so events
        pop in the order they would had every move been pushed. Moving one earlier than its entry: mark
        the entry dead, drop it from here, and push. `cancel` of the entry's seq cancels the event."""
        return self._deferred

    def settle(self, seq: int) -> None:
        """A `batch` done: `seq` is the next seq to hand out; compact as `reschedule_many` does."""
        self._seq = seq
        self._compact_if_due()

    def cancel(self, seq: int) -> None:
        """Forget a pending event. Idempotent; cancelling one that already fired does nothing harmful."""
        if seq < self._seq:
            self._dead.add(seq)
            self._deferred.pop(seq, None)
        self._compact_if_due()

    def _compact_if_due(self) -> None:
        """Compact once cancelled events are at least half the heap (and more than a few)."""
        if len(self._dead) > 64 and len(self._dead) * 2 >= len(self._heap):
            self._compact()

    def _compact(self) -> None:
        # Maintain heap invariant after dropping dead entries.
        self._heap = [item for item in self._heap if item[2] not in self._dead]
        heapq.heapify(self._heap)
        self._dead.clear()

    def peek_time(self) -> float | None:
        """When the next live event fires, or None when nothing is pending."""
        heap = self._heap
        while heap:
            seq = heap[0][2]
            if seq in self._dead:
                self._dead.discard(heapq.heappop(heap)[2])
            elif seq in self._deferred:
                self._put_back(heapq.heappop(heap))
            else:
                return heap[0][0]
        return None

    def _put_back(self, entry: tuple[float, int, int, E]) -> None:
        """An entry that stood in for a later key has come up: push the event at its true key."""
        moved = self._deferred.pop(entry[2])
        at, seq = moved.finish_at, moved.finish_seq
        heapq.heappush(self._heap, (at, entry[1], seq, entry[3]))
        moved.entry_at, moved.entry_seq = at, seq

    def pop(self) -> Scheduled[E] | None:
        """Advance the clock to the next live event and return it; None when the heap is empty."""
        while self._heap:
            entry = heapq.heappop(self._heap)
            time, priority, seq, event = entry
            if seq in self._dead:
                self._dead.discard(seq)
                continue
            if seq in self._deferred:
                self._put_back(entry)
                continue
            self.now = time
            self.popped += 1
            return Scheduled(time, priority, seq, event)
        return None
