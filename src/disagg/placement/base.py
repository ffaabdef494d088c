"""The policy interface: a pure function of (snapshot, queue, now, rng) → Decisions.

A policy inside `placement.fairness.FairPolicy` is also handed the round's fair-share terms (`terms`): what
the wrapper computed from the snapshot's tenancy for this round, passed as an argument rather than written
back into the snapshot, so that the snapshot stays what the shell observed.

`stopwatch` is how the shell lends a clock for the timings; the core never reads one itself.

A queue may come as a `WaitingQueue`: its jobs carry the W they had when they were queued, and
`wait_rounds(job)` is the job's W this round. A policy that reads W and says so
(`reads_waiting_queue = True`) reads it there for the jobs it looks at; the shell hands it one only
then (the simulator, whose queue of thousands waits round after round).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Protocol

import numpy as np

from disagg.model import Cluster, Job
from disagg.placement.decisions import Decisions

Clock = Callable[[], float]
#: Each tenant's fair-share term on its jobs' unscheduled arcs (utility units: `fairness.fair_bonus`), from
#: `FairPolicy` for the policy it wraps. The flow policies price it; the sequential baselines ignore it.
FairTerms = Mapping[str, float]


def no_clock() -> float:
    """The default clock of the pure core: time does not pass, timings come out as zero."""
    return 0.0


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for one round.

    A round at 12,500 machines allocates a few hundred thousand short-lived, acyclic objects (job
    states, journals, grants, records); each 700 allocations start a collection, and every tenth
    of those every tenth walks the whole heap, snapshot and queue included: about 0.2 s of CPU per
    round, a quarter of it, for no garbage (reference counting frees all of it). Nothing a round
    computes depends on the collector, so pausing it changes no decision. Re-entrant: it only turns
    the collector back on if it was on when the round began, and then settles the one young-generation
    collection the round put off (`_settle_young`), here rather than at some later allocation in the
    caller, so that the round's timings include it; only when the round did put one off (its
    allocations passed the young generation's threshold: a caller that raised it, as the simulator
    does, is not collected after every round).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            # (settled before the collector is back on: the first allocation after `gc.enable()`, the
            # very tuple of `gc.get_count()`, would start the young collection that settling replaces)
            if gc.get_count()[0] > gc.get_threshold()[0]:
                _settle_young()
            gc.enable()


#: Rounds settled by moving their objects to the oldest generation since the last full collection
#: (`_settle_young`); one list, mutated in place.
_moved_old = [0]


def _settle_young() -> None:
    """What the young generation holds when a round ends is what the round built and returns (its
    decisions' records: some 41,000 objects at 12,500 machines; the rest was freed by reference
    counting, and a round makes no cycles): a young collection would walk them all and find nothing,
    then the middle generation's would walk them again (5.5 ms of a 115 ms round). They are moved
    to the oldest generation at once instead (`gc.freeze` then `gc.unfreeze`: two list splices), where
    only a full collection walks them, as it would have anyway. The caller's own young and middle
    objects move with them (a cycle among those waits for a full collection), and the move restarts
    the generations' counts, which would otherwise have led to a full collection after about
    threshold₁ × threshold₂ young collections (100 at Python's defaults): so every that-many-th round
    settled here runs a full collection instead (`gc.collect()`, inside that round's timings), and
    cycles are still collected. A caller that froze objects itself (the simulator does, for a run)
    keeps them frozen: then the young collection runs as before (`unfreeze` would thaw its objects)."""
    if gc.get_freeze_count() != 0:
        gc.collect(0)
        return
    _, per_middle, per_full = gc.get_threshold()
    _moved_old[0] += 1
    if _moved_old[0] >= max(1, per_middle * per_full):
        _moved_old[0] = 0
        gc.collect()
        return
    gc.freeze()
    gc.unfreeze()


class WaitingQueue(list[Job]):
    """A round's queue whose jobs' W (`Job.wait_rounds`) is kept apart: each job as it was queued,
    and `wait_rounds(job)` the W it has this round.

    Raising W means a new `Job` (they are immutable): a simulated queue of thousands that waits round
    after round copied every job of it each round, a tenth of a run, where a flow round reads W of
    the jobs it admits, once each. A policy that reads W only through `wait_rounds` says so with
    `reads_waiting_queue = True`; any other is handed a plain list of current jobs.

    `reasons_later`: the caller reads why jobs wait only now and then (the simulator: of its last
    round), so a flow round may leave them to be made when read (`decisions.LaterReasons`)."""

    def __init__(self, jobs: Iterable[Job], wait_rounds: Callable[[Job], int], reasons_later: bool = False) -> None:
        super().__init__(jobs)
        self.wait_rounds = wait_rounds
        self.reasons_later = reasons_later


def current_jobs(queue: Sequence[Job]) -> Sequence[Job]:
    """The queue with every job's W as it is this round (a `WaitingQueue`'s, raised to its `wait_rounds`)."""
    if not isinstance(queue, WaitingQueue):
        return queue
    return [replace(j, wait_rounds=w) if w != j.wait_rounds else j for j, w in zip(queue, map(queue.wait_rounds, queue),
                                                                                  strict=True)]


class Policy(Protocol):
    """Decides where queued jobs go. Pure: no I/O, no clock (timings use the `clock` lent to it)."""

    name: str

    def place(
        self,
        snapshot: Cluster,
        queue: Sequence[Job],
        now: float,
        rng: np.random.Generator,
        clock: Clock = no_clock,
        terms: FairTerms | None = None,
    ) -> Decisions: ...


PolicyFactory = Callable[[], Policy]
