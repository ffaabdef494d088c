"""The last read of the slices waiting for a worker, kept so that a worker that finishes takes its next
slice without a read of the store.

Under `bench controller` 12,000 slices wait to be composed; each read ranks them all (14 ms of CPU) and a
worker finishing every few milliseconds made the loop process read twelve times a second: a fifth of its
time, taken from the placement round (the GIL). A read keeps each tenant's oldest `per_tenant` slices;
what a fair pick takes from those is what it would take from a read made now, as long as (1) no tenant
that had more than `per_tenant` waiting runs short of the slices the free workers could take, and (2)
nothing new has come to wait. (1) is checked at each pick; (2) is bounded by age: a read serves for
`fresh_s` at most. A slice that arrives meanwhile waits that long for its turn at worst, and only while
every worker is busy with older slices (an empty backlog is read again at once).

Pure: the caller passes the time and holds the lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from disagg.control.slice import fair_pick
from disagg.model.states import SliceState

#: How long one read of the slices to work serves the workers that finish (seconds).
FRESH_S = 0.5

Waiting = tuple[str, SliceState, str]  # slice id, its state, its tenant


class SliceBacklog:
    """What the last read returned and no worker has taken yet, and which tenants it cut short."""

    def __init__(self, fresh_s: float = FRESH_S) -> None:
        self.fresh_s = fresh_s
        self._waiting: list[Waiting] = []
        self._read_at = float("-inf")
        self._cut: frozenset[str] = frozenset()

    def refill(self, read: Sequence[Waiting], at: float, per_tenant: int | None, gone: Collection[str]) -> None:
        """A read made at `at` (each tenant's oldest `per_tenant`), less the slices `gone`: in the workers'
        hands (those just handed out from it among them) or left by a worker for the next read."""
        counts = Counter(tenant for _, _, tenant in read)
        self._cut = frozenset(t for t, n in counts.items() if per_tenant is not None and n >= per_tenant)
        self._waiting = [w for w in read if w[0] not in gone]
        self._read_at = at

    def pick(self, now: float, inflight: Mapping[str, str], skips: Collection[str], free: int
             ) -> list[Waiting] | None:
        """The slices the `free` idle workers take now, removed from the backlog; None when only a new read
        can say (too old, nothing left to take, or a tenant cut short is running out)."""
        if now - self._read_at > self.fresh_s:
            return None
        self._waiting = [w for w in self._waiting if w[0] not in inflight and w[0] not in skips]
        if not self._waiting:
            return None
        left = Counter(tenant for _, _, tenant in self._waiting)
        if any(left[tenant] < free for tenant in self._cut):
            return None
        chosen = fair_pick(self._waiting, Counter(inflight.values()), free)
        taken = {w[0] for w in chosen}
        self._waiting = [w for w in self._waiting if w[0] not in taken]
        return chosen

    def forget(self) -> None:
        """The next pick reads again (the store changed in a way the backlog cannot follow)."""
        self._read_at = float("-inf")
