"""What runs, as the columns a round's free state reads off a snapshot's allocations
(`AllocationColumns`): each allocation's machine, cpus, memory, traffic and held devices, in the
snapshot's order.

A simulator's or a controller's rounds see nearly the same allocations from one round to the next
(the same `Allocation` records, less those that ended, plus those that started), so the columns are
carried over by identity (`allocation_columns`): only the allocations new since the last snapshot are
read, and the rest are gathered from the last columns. The columns are the same numbers, in the same
order, as reading every allocation afresh (`read_allocation_columns`), so the sums a free state makes
of them are the same floats to the bit.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
from numpy.typing import NDArray

from disagg.model import Allocation

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class AllocationColumns:
    """Per allocation of a snapshot (in its order): its machine's location index, its cpus, memory
    and traffic, and its held devices as inventory indices (-1 for a device the inventory does not
    list), flat (`dev`), each allocation's at `dev_start` for `dev_count`. Read-only arrays."""

    #: The allocations read (kept: while they are, no other object can have their ids).
    allocations: tuple[Allocation, ...]
    #: The location and device indexes the columns were read with (compared by identity).
    loc_index: dict[str, int]
    dev_index: dict[str, int]
    ids: IntArray
    machine: IntArray
    cpus: FloatArray
    mem: FloatArray
    gbps: FloatArray
    dev: IntArray
    dev_start: IntArray
    dev_count: IntArray

    def devices_of(self, rows: IntArray) -> tuple[IntArray, IntArray]:
        """The held devices of the allocations at `rows`, in that order (flat), and how many each holds."""
        counts = self.dev_count[rows]
        return ragged_take(self.dev, self.dev_start[rows], counts), counts


def ragged_take(flat: IntArray, starts: IntArray, counts: IntArray) -> IntArray:
    """The segments `flat[starts[i] : starts[i] + counts[i]]`, one after another, in one gather."""
    total = int(counts.sum())
    out_start = np.cumsum(counts) - counts
    out: IntArray = flat[np.repeat(starts - out_start, counts) + np.arange(total, dtype=np.int64)]
    return out


def read_allocation_columns(allocations: Sequence[Allocation], loc_index: dict[str, int],
                            dev_index: dict[str, int]) -> AllocationColumns:
    """Every allocation's columns, read afresh: one pass per attribute (map/attrgetter, no Python loop).
    An allocation on a machine `loc_index` lacks raises KeyError, as a free state always did."""
    allocations = tuple(allocations)
    n = len(allocations)
    machine = np.fromiter(map(loc_index.__getitem__, map(attrgetter("machine"), allocations)), dtype=np.int64,
                          count=n)
    held = list(map(attrgetter("devices"), allocations))
    dev_count = np.fromiter(map(len, held), dtype=np.int64, count=n)
    n_dev = int(dev_count.sum())
    dev = np.fromiter(map(dev_index.get, itertools.chain.from_iterable(held), itertools.repeat(-1)),
                      dtype=np.int64, count=n_dev)
    return _columns(allocations, loc_index, dev_index, np.fromiter(map(id, allocations), dtype=np.int64, count=n),
                    machine, _column(allocations, "cpus"), _column(allocations, "memory_gb"),
                    _column(allocations, "network_gbps"), dev, np.cumsum(dev_count) - dev_count, dev_count)


def _column(items: Sequence[object], name: str) -> FloatArray:
    return np.fromiter(map(attrgetter(name), items), dtype=np.float64, count=len(items))


def _columns(allocations: tuple[Allocation, ...], loc_index: dict[str, int], dev_index: dict[str, int],
             ids: IntArray, machine: IntArray, cpus: FloatArray, mem: FloatArray, gbps: FloatArray,
             dev: IntArray, dev_start: IntArray, dev_count: IntArray) -> AllocationColumns:
    for a in (ids, machine, cpus, mem, gbps, dev, dev_start, dev_count):
        a.flags.writeable = False  # kept for the next round: a write would leak into it
    return AllocationColumns(allocations, loc_index, dev_index, ids, machine, cpus, mem, gbps, dev, dev_start,
                             dev_count)


#: The last snapshot's columns (`allocation_columns`).
_kept: list[AllocationColumns] = []


def allocation_columns(allocations: Sequence[Allocation], loc_index: dict[str, int],
                       dev_index: dict[str, int]) -> AllocationColumns:
    """`read_allocation_columns`, carried over from the last call's columns: an allocation that was
    there (the same record: identity, which the kept records make unambiguous, and records are frozen)
    has the same columns, gathered from there; only the new ones are read. Read afresh when the indexes
    are others (the inventory changed). At 128 machines a simulator's round holds some 550
    allocations of which a dozen or two are new, and reading all of them was most of building its
    free state."""
    kept = _kept[0] if _kept else None
    if kept is None or kept.loc_index is not loc_index or kept.dev_index is not dev_index:
        cols = read_allocation_columns(allocations, loc_index, dev_index)
    elif allocations is kept.allocations:
        return kept
    else:
        cols = _carry_over(kept, tuple(allocations))
    _kept[:] = [cols]
    return cols


def _carry_over(kept: AllocationColumns, allocations: tuple[Allocation, ...]) -> AllocationColumns:
    """The columns of `allocations`: gathered from `kept` where an allocation is one of its, read
    where it is new."""
    n = len(allocations)
    ids = np.fromiter(map(id, allocations), dtype=np.int64, count=n)
    if n == len(kept.ids) and np.array_equal(ids, kept.ids):
        return _columns(allocations, kept.loc_index, kept.dev_index, kept.ids, kept.machine, kept.cpus, kept.mem,
                        kept.gbps, kept.dev, kept.dev_start, kept.dev_count)
    if not len(kept.ids) or not n:
        return read_allocation_columns(allocations, kept.loc_index, kept.dev_index)
    order = np.argsort(kept.ids, kind="stable")
    sorted_ids = kept.ids[order]
    at = np.minimum(np.searchsorted(sorted_ids, ids), len(order) - 1)
    src = order[at]
    new = np.flatnonzero(sorted_ids[at] != ids)
    machine, cpus, mem, gbps = kept.machine[src], kept.cpus[src], kept.mem[src], kept.gbps[src]
    dev_count, starts, pool = kept.dev_count[src], kept.dev_start[src], kept.dev
    if len(new):
        fresh = read_allocation_columns(list(map(allocations.__getitem__, new.tolist())), kept.loc_index,
                                        kept.dev_index)
        machine[new], cpus[new], mem[new], gbps[new] = fresh.machine, fresh.cpus, fresh.mem, fresh.gbps
        dev_count[new] = fresh.dev_count
        starts[new] = fresh.dev_start + len(pool)
        pool = np.concatenate([pool, fresh.dev])
    return _columns(allocations, kept.loc_index, kept.dev_index, ids, machine, cpus, mem, gbps,
                    ragged_take(pool, starts, dev_count), np.cumsum(dev_count) - dev_count, dev_count)


def forget_kept_allocations() -> None:
    """Drop the kept columns, so that the next round reads every allocation afresh."""
    _kept.clear()
