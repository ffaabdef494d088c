"""Phase 1: where each task's cpus and memory go (the seed's Fig. 2a).

    job → class → (its preferred machines | X_shape → machines) → sink,   job → U → sink

Machines are nodes by class (`MachineGroups`: machines of equal free state, Firmament's equivalence
classes), so the network is sized by the queue's classes and the cluster's distinct free states, not by
its machine count; the decoder splits a machine class's flow back over its machines (`split`).
A job is one node with supply = its task count (its tasks have identical arcs). A class is the
set of jobs with the same request, profile, SLO and importance; a shape is the set of classes with
the same request. Each shape's aggregator X links to the shape's cheapest machines; each class
links to X (paying its own offset over the shape's prices) and to its few cheapest machines
directly. Machine → sink has a free arc up to the machine's free local devices and a spill arc
priced at what going remote costs a typical job, so tasks spread to where their devices are local.
What each arc costs, which arcs exist and how many tasks a machine takes are the policy's cost
model's answers (`cost_models.py`); this module builds the network from them.

The decoder hands each task a machine from the flow's lists, checking the real fit in `FreeState`
(several classes may share a machine's cpus); a job whose tasks do not all fit fails (gang).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import compress
from operator import attrgetter
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from disagg.placement.commit import EPS
from disagg.placement.cost import P_LOCAL, P_SPARE_DEVICES, SCALE, SPREAD
from disagg.placement.cost_models import (
    BoolArray,
    ClassRows,
    CostModel,
    MachineArcs,
    MachineColumns,
    local_capacity,
)
from disagg.placement.decisions import Reason
from disagg.placement.jobstate import (
    IntArray,
    JobTable,
    RoundJob,
    flow_lists,
    gang_shortfall,
    profile_arrays,
    request,
    unscheduled,
)
from disagg.placement.network import FlowNetwork
from disagg.placement.queue import task_fit_counts, task_room_for
from disagg.placement.state import FloatArray, FreeState, Offers, column

#: Direct arcs from a class to its own cheapest machines (the rest goes through the aggregator).
PREFERRED = 8
#: How many of its shape's cheapest machines a class prices itself.
CLASS_HEAD = 256
_INT64_MIN = int(np.iinfo(np.int64).min)
#: Up to how many machines the decoder splits a machine class's flow over its machines in Python lists
#: (`_ListSplitter`) rather than arrays (`_Splitter`).
LIST_SPLIT_MAX = 1024
#: How far the decoder looks along a flow list for a machine the task really fits on.
SCAN_LIMIT = 64

NEVER = np.iinfo(np.int64).max

#: Arcs as arrays: tails, heads, capacities, costs.
Arcs = tuple[IntArray, IntArray, IntArray, IntArray]
#: Per tail node, its [machine, tasks] pairs with flow, cheapest first (`jobstate.flow_lists`).
OfferLists = dict[int, list[list[int]]]


@dataclass
class ArcBuffer:
    """Arcs gathered piece by piece, joined into arrays once: as arrays (`add`), or a few at a time as
    Python integers (`add_rows`: a shape of one class adds one arc to its aggregator and a few to its
    machines, thousands of times a simulated run), kept in lists until the next array or the join."""

    tails: list[IntArray] = field(default_factory=list)
    heads: list[IntArray] = field(default_factory=list)
    caps: list[IntArray] = field(default_factory=list)
    costs: list[IntArray] = field(default_factory=list)
    #: The arcs added by `add_rows` since the last array: tails, heads, caps, costs.
    rows: tuple[list[int], list[int], list[int], list[int]] = field(default_factory=lambda: ([], [], [], []))

    def add(self, tails: IntArray, heads: IntArray, caps: IntArray, costs: IntArray) -> None:
        self._flush()
        self.tails.append(tails)
        self.heads.append(heads)
        self.caps.append(caps)
        self.costs.append(costs)

    def add_rows(self, tails: list[int], heads: list[int], caps: list[int], costs: list[int]) -> None:
        """Arcs as lists of Python integers, after those added so far."""
        rows = self.rows
        rows[0].extend(tails)
        rows[1].extend(heads)
        rows[2].extend(caps)
        rows[3].extend(costs)

    def _flush(self) -> None:
        """The arcs of `add_rows` as one array piece, in their place among the pieces."""
        if self.rows[0]:
            for pieces, values in zip((self.tails, self.heads, self.caps, self.costs), self.rows, strict=True):
                pieces.append(np.array(values, dtype=np.int64))
            self.rows = ([], [], [], [])

    def arrays(self) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        def cat(xs: list[IntArray]) -> IntArray:
            # (`copy=False`: the join is a new array already; int64 as the pieces mostly are, no second copy.)
            return np.concatenate(xs).astype(np.int64, copy=False) if xs else np.zeros(0, dtype=np.int64)

        self._flush()
        return cat(self.tails), cat(self.heads), cat(self.caps), cat(self.costs)


@dataclass
class Classes:
    """Jobs grouped into classes (same request, profile, goal, importance) and classes into shapes."""

    of_job: IntArray
    counts: IntArray
    tasks: IntArray
    representative: list[RoundJob]
    shapes: list[list[int]]


@dataclass
class Pricing:
    """The class and shape arcs of phase 1, and what the decoder and the explanations need."""

    preferred: ArcBuffer = field(default_factory=ArcBuffer)
    shared: ArcBuffer = field(default_factory=ArcBuffer)
    to_shape: ArcBuffer = field(default_factory=ArcBuffer)
    surcharges: list[int] = field(default_factory=list)
    min_cost: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: Per class, its cheapest arc without the SLO's postponement (NA; NEVER where no arc carries one):
    #: a class that waits only because of it is held back for its SLO, not for its cost.
    min_unheld: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: Per shape (by `id` of the round's shape object): how many of its tasks each machine can take.
    fit: dict[int, IntArray] = field(default_factory=dict)
    #: Per shape, how many of its tasks the machines could take in the round's first iteration (before
    #: any job of the round took anything): shared by the round's iterations.
    first_fit: dict[int, int] = field(default_factory=dict)
    #: The machines in classes of equal free state (the network's machine nodes are these classes).
    groups: MachineGroups | None = None
    #: Per shape (by `id`), per machine class: how many of its tasks the class's machines take together.
    group_fit: dict[int, IntArray] = field(default_factory=dict)
    #: Per machine, how many of the round's smallest tasks its cpus and memory hold (`task_room`), as the
    #: build found it (the decoder splits in the same state).
    room: FloatArray | None = None


class Spans(Sequence[IntArray]):
    """The slices of `order` between consecutive `bounds` (span i: `order[bounds[i]:bounds[i + 1]]`), each
    made when read."""

    __slots__ = ("_bounds", "_order")

    def __init__(self, order: IntArray, bounds: list[int]) -> None:
        self._order = order
        self._bounds = bounds

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def lists(self) -> tuple[list[int], list[int]]:
        """`order` as a list, and the bounds (for walking the spans in Python)."""
        return self._order.tolist(), self._bounds

    @overload
    def __getitem__(self, i: int) -> IntArray: ...

    @overload
    def __getitem__(self, i: slice) -> list[IntArray]: ...

    def __getitem__(self, i: int | slice) -> IntArray | list[IntArray]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self._bounds) - 1
        if not -n <= i < n:
            raise IndexError(f"span {i} of {n}")
        at = i % n
        return self._order[self._bounds[at]:self._bounds[at + 1]]


@dataclass(frozen=True)
class MachineGroups:
    """Machines whose free state the network cannot tell apart (the same free cpus and memory, local
    devices, uplink load and capacity for every shape of the round), as one node each — Firmament's
    equivalence classes of machines. At 12,500 machines a round sees a few hundred such classes, so
    phase 1's network is sized by the queue's classes, not by the cluster. The decoder splits a class's
    flow back over its machines (`split`)."""

    of_machine: IntArray  # per machine, its class
    first: IntArray  # per class, its first machine (the one its columns are read from)
    #: Per class, its machines in order, as arrays (the splitter reads a class's machines at once), each
    #: made when read: a simulated round's classes are mostly of one machine each, a hundred a phase,
    #: and the splitter reads the few the flow used.
    member_arrays: Spans

    @property
    def members(self) -> list[list[int]]:
        """Per class, its machines in order, as lists."""
        return [m.tolist() for m in self.member_arrays]

    @staticmethod
    def of(columns: list[NDArray[np.float64] | IntArray], rack: IntArray) -> MachineGroups:
        """Machines with equal `columns` in one class; a class's machines in turn across racks (its
        first machine in each rack, then its second in each, ...), so that the tasks a class's flow
        brings spread over racks' pools and uplinks as the per-machine network's did."""
        found = _sorted_rows(columns)
        if found is not None:
            order, starts = found
        else:
            keys = _row_keys(columns)
            # Sorted by every column (stable: equal rows keep machine order), a class starts where a row differs.
            order = np.lexsort(keys[::-1]) if len(keys) > 1 else np.argsort(keys[0], kind="stable")
            differs = np.zeros(max(len(order) - 1, 0), dtype=bool)
            for k in keys:
                sorted_k = k[order]
                differs |= sorted_k[1:] != sorted_k[:-1]
            starts = np.concatenate(([True], differs))  # (np.r_ costs several microseconds a call)
        first = order[starts]
        of_machine = np.empty(len(order), dtype=np.int64)
        of_machine[order] = np.cumsum(starts) - 1
        # Classes are numbered in sorted order: each one's machines run from its start in `order` to the next.
        bounds = [*np.flatnonzero(starts).tolist(), len(order)]
        n_racks = int(rack.max(initial=0)) + 1
        cell = of_machine * n_racks + rack  # (class, rack)
        by_rack = np.argsort(cell, kind="stable")  # per class, per rack, in machine order
        cell = cell.take(by_rack)
        # Each machine's rank in its (class, rack) run: its place less where its run starts (the running
        # maximum of the runs' starts), fewer calls than repeating each start over its run.
        at = np.arange(len(cell))
        run = np.empty(len(cell), dtype=bool)
        run[:1] = True
        np.not_equal(cell[1:], cell[:-1], out=run[1:])
        rank = at - np.maximum.accumulate(np.where(run, at, 0))
        # (class, rank in its rack, rack) as one key: each part is below its radix, so the order is theirs.
        turn = (of_machine.take(by_rack) * (int(rank.max(initial=0)) + 1) + rank) * n_racks + rack.take(by_rack)
        # (Fancy-index results of int64 orders: new arrays of int64 already, no copies needed.)
        order = by_rack[np.argsort(turn, kind="stable")].astype(np.int64, copy=False)
        return MachineGroups(of_machine, first.astype(np.int64, copy=False), Spans(order, bounds))

    def total(self, per_machine: IntArray) -> IntArray:
        """A per-machine count summed over each class."""
        return np.bincount(self.of_machine, weights=per_machine, minlength=len(self.first)).astype(np.int64)


#: Below this magnitude every integer is a float64 exactly, and comparing two values as floats is
#: comparing them as they are.
_EXACT = 2.0**53
#: Up to how many values (columns × machines) `_sorted_rows` sorts the columns as they are, in one
#: lexsort: beyond, the packed keys of `_row_keys` sort faster (17 columns of 1,000 machines: one sort of
#: every value 1.1 ms against 0.16 ms).
_JOINT_MAX_VALUES = 4096


def _sorted_rows(columns: list[NDArray[np.float64] | IntArray]) -> tuple[IntArray, BoolArray] | None:
    """The machines sorted by the usual columns (no NaN, every value below 2**53 in magnitude; of a small
    cluster, `_JOINT_MAX_VALUES`) as they are, first column first (stable: equal rows keep machine order),
    and where each row differs from the one before it (True for the first): one lexsort of the columns
    as one float array (they compare as floats exactly) and one comparison, where ranking them into packed
    keys (`_row_keys`) took a dozen numpy calls more. The simulator's rounds group a hundred machines by
    a handful of columns each phase 1, thousands of times a run. None where the floats would not stand
    for the values: a NaN (equal to nothing), or an integer a float64 cannot hold exactly."""
    if not columns or len(columns) * len(columns[0]) > _JOINT_MAX_VALUES:
        return None
    values = np.array(columns, dtype=np.float64)  # (column, machine)
    # Every |value| below 2**53 as its greatest and least are (False for NaN: a NaN bound compares False).
    if values.ndim != 2 or values.size == 0 or not (values.max() < _EXACT and values.min() > -_EXACT):
        return None
    order = np.lexsort(values[::-1])
    ordered = values.take(order, axis=1)  # (`values[:, order]` through fancy indexing took several times longer)
    starts = np.empty(len(order), dtype=bool)
    starts[0] = True
    (ordered[:, 1:] != ordered[:, :-1]).any(axis=0, out=starts[1:])  # (the method: no np.any wrapper)
    return order, starts


def _row_keys(columns: list[NDArray[np.float64] | IntArray]) -> list[IntArray]:
    """Integer keys whose lexicographic order and equality are the columns' (first column first), several
    columns packed into one key while their radices allow: a machine class's columns are mostly small
    counts, and sorting by 17 columns of 12,500 machines one pass per column cost more than the rest of
    the grouping. Each column becomes its values' ranks (integers: less their minimum; floats: their
    rank among the distinct values). A float column with a NaN (NaN equals nothing) or integers too far
    apart is kept as it is, as a key of its own. (For the columns `_sorted_rows` does not sort.)"""
    keys: list[IntArray] = []
    packed: IntArray | None = None
    radix_so_far = 1
    # The columns compare as one array of their common type (floats, when any is), as a stack of them did:
    # integers beyond a float's precision are compared as floats.
    as_floats = np.result_type(*columns).kind == "f"
    for values in map(np.asarray, columns):
        if values.dtype.kind in "iub":
            # Each bound read once (a round packs a dozen integer columns, and each reduction is a call).
            low, high = int(values.min(initial=0)), int(values.max(initial=0))
            # |values| ≤ 2**53 unless a bound is beyond it (then as it was: numpy's abs, int64's least included).
            if as_floats and (low < -2**53 or high > 2**53) and int(np.abs(values).max(initial=0)) > 2**53:
                values = values.astype(np.float64)
        if values.dtype.kind in "iub" and high - low < 2**62:
            codes = values.astype(np.int64) - low
            radix = int(codes.max(initial=0)) + 1
        elif values.dtype.kind == "f" and not np.isnan(values).any():
            distinct, inverse = np.unique(values, return_inverse=True)
            codes, radix = inverse.astype(np.int64).ravel(), len(distinct)
        else:  # a float column with a NaN, or integers too far apart to rank by subtraction
            if packed is not None:
                keys.append(packed)
            keys.append(values)  # type: ignore[arg-type]
            packed, radix_so_far = None, 1
            continue
        if packed is not None and radix_so_far * radix < 2**62:
            packed = packed * radix + codes
            radix_so_far *= radix
        else:
            if packed is not None:
                keys.append(packed)
            packed, radix_so_far = codes, radix
    if packed is not None:
        keys.append(packed)
    return keys


def classify(jobs: list[RoundJob]) -> Classes:
    """Jobs of one round into classes and classes into shapes. A round's job states share one shape
    object per distinct request, so shapes are told apart by identity (no hashing of nested tuples)."""
    # (Columns, not a pass per job: a full cluster's phase holds hundreds of jobs, most of a class of their own.)
    keys = list(zip(map(id, map(attrgetter("shape"), jobs)), map(attrgetter("profile.name"), jobs),
                    map(attrgetter("tau"), jobs), map(attrgetter("z"), jobs), map(attrgetter("gbps"), jobs),
                    map(attrgetter("guard"), jobs), strict=True))
    # Classes are numbered as they first appear; each is represented by its first job. Each job's key is
    # hashed once: it maps to the place of the first job with that key (`count` runs along the jobs),
    # and those places, in the dict's order (that of their first appearance), are the classes. (Not
    # `np.unique` of the places: its wrapper cost more than this on a phase's few dozen jobs.)
    seen: dict[tuple[object, ...], int] = {}
    first_at = list(map(seen.setdefault, keys, itertools.count()))
    firsts = list(seen.values())
    if len(firsts) == len(first_at):  # every job a class of its own (most phases)
        of_job = np.arange(len(first_at), dtype=np.int64)
    else:
        rank = {at: c for c, at in enumerate(firsts)}
        of_job = np.fromiter(map(rank.__getitem__, first_at), dtype=np.int64, count=len(first_at))
    reps = list(map(jobs.__getitem__, firsts))
    counts = column(jobs, "count", np.int64)
    tasks = np.bincount(of_job, weights=counts, minlength=len(reps)).astype(np.int64)
    shapes: dict[int, list[int]] = {}
    for c, js in enumerate(reps):
        shapes.setdefault(id(js.shape), []).append(c)
    return Classes(of_job, counts, tasks, reps, list(shapes.values()))


@dataclass(frozen=True, slots=True)
class Candidates:
    """The machines one shape's classes are priced against: which, how many of its tasks each can take,
    what prices them, and the shape's own price there (its aggregator's arcs)."""

    machines: IntArray
    fit: IntArray
    columns: MachineColumns
    proxy: IntArray
    size: IntArray  # per machine class (indexed as `fit`), how many machines it has
    local: IntArray  # per machine class (indexed as `fit`), tasks of the shape one machine's own devices serve

    def head(self, n: int) -> Candidates:
        """The cheapest machine classes for the shape that hold `n` machines between them (all of them
        when there are no more)."""
        size = self.size[self.machines]
        if int(size.sum()) <= n:
            return self
        order = np.argsort(self.proxy, kind="stable")
        at = order[:int(np.searchsorted(np.cumsum(size[order]), n)) + 1]
        c = self.columns
        return Candidates(self.machines[at], self.fit, MachineColumns(c.share[at], c.load[at], c.pref[at]),
                          self.proxy[at], self.size, self.local)


def price(state: FreeState, cls: Classes, costs: CostModel, min_candidates: int,
          first_fit: dict[int, int] | None = None, known: dict[int, IntArray] | None = None,
          table: JobTable | None = None) -> Pricing:
    """Arcs from classes to machine classes (`MachineGroups`), directly and through one aggregator per
    shape. `known`: the shapes' fits found already in this state (`fits_nowhere`'s), by shape. `table`:
    the round's job numbers (the classes' rows are read off it), when the caller has it."""
    used_frac = 1.0 - state.cpu / np.maximum(state.cpu_total, 1e-9)
    up_load = state.link_load()[:state.n_machines]
    local_free: dict[str, IntArray] = {k: state.local_free(k) for k in state.kinds}
    pricing = Pricing(min_cost=np.full(len(cls.representative), NEVER, dtype=np.int64),
                      min_unheld=np.full(len(cls.representative), NEVER, dtype=np.int64),
                      first_fit={} if first_fit is None else first_fit)
    rep_ids = [shape_representative(cls, members) for members in cls.shapes]
    reps = [cls.representative[c] for c in rep_ids]
    fits = [_shape_fit(state, cls, members, rep, costs, local_free, pricing, known)
            for members, rep in zip(cls.shapes, reps, strict=True)]
    pinned = [state.local_free(k, m) for rep in reps for k, m in sorted(rep.job.tasks.models.items())]
    # (A kind no machine has free is a column of zeros: it tells no machines apart, nor orders them.)
    groups = pricing.groups = MachineGroups.of([state.cpu, state.mem, used_frac, up_load,
                                                *map(local_free.__getitem__, state.local_kinds), *pinned, *fits],
                                               state.loc_rack[:state.n_machines])
    at = groups.first
    sizes = np.bincount(groups.of_machine, minlength=len(at))
    # The machine classes' columns, read once for every shape: of the kinds the prices read (those some
    # machine has free, those a shape wants), not of every kind.
    read = {*state.local_kinds, *(k for rep in reps for k in rep.wants)}
    free_at = {k: v[at] for k, v in local_free.items() if k in read}
    used_at, load_at = used_frac[at], up_load[at]
    # Per shape with machines: its number, its machine classes, what prices them.
    shaped: list[tuple[int, IntArray, MachineColumns]] = []
    for g, (rep, fit) in enumerate(zip(reps, fits, strict=True)):
        gfit = pricing.group_fit[id(rep.shape)] = groups.total(fit)
        cand = np.nonzero(gfit > 0)[0]
        if len(cand):
            shaped.append((g, cand, _shape_columns(state, rep, cand, at, used_at, load_at, free_at)))
    # Every class's numbers once (rows of the arcs' matrices), for all the shapes' prices below.
    rows = class_rows(cls.representative, table)
    shaped_reps, shaped_columns = [rep_ids[g] for g, _, _ in shaped], [c for _, _, c in shaped]
    # A cluster of no more machines than a head holds: every shape's head is all its candidates, so its
    # classes' columns are known before the aggregators' prices are, and both are priced in one call.
    together = state.n_machines <= CLASS_HEAD
    if together:
        proxies, costed = machine_costs(rows, shaped_reps, [cls.shapes[g] for g, _, _ in shaped], shaped_columns,
                                        costs)
    else:
        proxies = shape_costs(rows, shaped_reps, shaped_columns, costs)
    priced: list[tuple[int, list[int], Candidates]] = []
    for (g, cand, columns), proxy in zip(shaped, proxies, strict=True):
        gfit = pricing.group_fit[id(reps[g].shape)]
        pricing.shared.add(np.full(len(cand), g, dtype=np.int64), cand, gfit[cand], proxy)
        priced.append((g, cls.shapes[g], Candidates(cand, gfit, columns, proxy, sizes,
                                                    _local_tasks(reps[g], free_at, len(at)))))
    heads = [kept if together else kept.head(CLASS_HEAD) for _, _, kept in priced]
    if not together:
        costed = class_costs(rows, [members for _, members, _ in priced], [head.columns for head in heads], costs)
    for (g, members, kept), head, arcs in zip(priced, heads, costed, strict=True):
        _price_classes(pricing, g, members, cls, kept, head, arcs)
    # (In class order: the spill arc's price is their median, whatever their order, and every class in
    # order, the usual case, is `rows` itself.)
    with_devices = sorted(c for g, members, _ in priced if sum(reps[g].wants.values()) for c in members)
    _surcharges(pricing, _rows_of(rows, with_devices), costs)
    return pricing


def class_rows(reps: list[RoundJob], table: JobTable | None) -> ClassRows:
    """The classes' numbers as `ClassRows` (column vectors): gathered off the round's `table` by their
    representatives' rows (one fancy index per number), or read off the representatives (no table)."""
    if table is None:
        return ClassRows.of(profile_arrays(reps), reps)
    at = JobTable.indices(reps)
    return ClassRows(tuple(a[at][:, None] for a in table.params), table.tau[at][:, None], table.z[at][:, None],
                     table.phi_local[at][:, None], table.guard[at][:, None])


def _shape_columns(state: FreeState, rep: RoundJob, cand: IntArray, at: IntArray, used_at: FloatArray,
                   load_at: FloatArray, free_at: dict[str, IntArray]) -> MachineColumns:
    """What prices a shape's candidate machine classes (`cand`; `at`: each class's first machine): the
    share of a task's devices that would be remote there, the uplink's load, the preference."""
    t = rep.job.tasks
    want_total = sum(rep.wants.values())
    if want_total:
        # (The first kind's local devices as floats, the others added: the sum of zeros and them as it was.)
        local: FloatArray | None = None
        for k, n in rep.wants.items():
            model = t.models.get(k)  # a pinned model: only its devices are local to the task
            here = np.minimum((free_at[k] if model is None else state.local_free(k, model)[at])[cand], n)
            local = here.astype(np.float64) if local is None else local + here
        assert local is not None
        share: FloatArray = (want_total - local) / want_total
    else:
        share = np.zeros(len(cand))
    pref = P_LOCAL + SPREAD * used_at[cand]
    for k in state.local_kinds:  # (another kind's spare devices add 0.0 to a positive pref: nothing)
        if t.wants(k) == 0:
            pref = pref + P_SPARE_DEVICES * (free_at[k][cand] > 0)
    return MachineColumns(share, load_at[cand], pref)


def _rows_of(rows: ClassRows, at: list[int] | IntArray) -> ClassRows:
    """The rows of the classes `at` (column vectors, as `rows`): `rows` itself where that is all of them
    in order (a round of one shape)."""
    ids = np.asarray(at, dtype=np.int64)
    if len(ids) == len(rows.tau) and (ids == np.arange(len(ids))).all():
        return rows
    return ClassRows(tuple(a[ids] for a in rows.params), rows.tau[ids], rows.z[ids], rows.phi_local[ids],
                     rows.guard[ids])


def _flat_rows(rows: ClassRows, at: IntArray) -> ClassRows:
    """The rows of the classes `at` as flat pairs (1-D: one element per arc, class `at[i]` for arc i)."""
    return ClassRows(tuple(a[:, 0][at] for a in rows.params), rows.tau[:, 0][at], rows.z[:, 0][at],
                     rows.phi_local[:, 0][at], rows.guard[:, 0][at])


def shape_costs(rows: ClassRows, rep_ids: list[int], columns: list[MachineColumns], costs: CostModel
                ) -> list[IntArray]:
    """`costs.shape_to_machine` of each shape (its first class, `rep_ids`, of all the classes' `rows`)
    against its candidate machines (`columns`), all in one call as flat pairs (see `class_costs`)."""
    if len(columns) <= 1:
        return [costs.shape_to_machine(_rows_of(rows, rep_ids), c).cost.ravel() for c in columns]
    n_cols = [len(c.share) for c in columns]
    flat = MachineColumns(*(np.concatenate([getattr(c, k) for c in columns]) for k in ("share", "load", "pref")))
    cost = costs.shape_to_machine(_flat_rows(rows, np.repeat(rep_ids, n_cols)), flat).cost.ravel()
    return np.split(cost, np.cumsum(n_cols)[:-1])


def machine_costs(rows: ClassRows, rep_ids: list[int], shapes: list[list[int]], columns: list[MachineColumns],
                  costs: CostModel) -> tuple[list[IntArray], list[MachineArcs]]:
    """`shape_costs` and `class_costs` (each shape's head all its candidates, `columns`) in one cost-model
    call (`CostModel.machine_arcs`): per shape a block of rows, its first class's as the aggregator's (its
    `rep_ids`) and then its classes' (`shapes`), against its columns. One shape (most phases): the block
    as a matrix; several: as flat pairs (see `class_costs`). Each call's fixed cost (some forty numpy
    calls on a few hundred elements) was most of pricing a simulated round's shapes and classes."""
    if not shapes:
        return [], []
    if len(shapes) == 1:
        ids = np.array([rep_ids[0], *shapes[0]], dtype=np.int64)
        as_shape = np.zeros((len(ids), 1), dtype=bool)
        as_shape[0] = True
        arcs = costs.machine_arcs(_rows_of(rows, ids), columns[0], as_shape)
        return [arcs.cost[0]], [MachineArcs(arcs.cost[1:], None if arcs.hold is None else arcs.hold[1:])]
    blocks = [[rep, *members] for rep, members in zip(rep_ids, shapes, strict=True)]
    n_rows = np.array([len(block) for block in blocks], dtype=np.int64)
    n_cols = np.array([len(c.share) for c in columns], dtype=np.int64)
    row_of, col_of, width = _pairs(n_rows, n_cols)
    leads = np.zeros(len(width), dtype=bool)  # per row, whether it is its block's first (the aggregator's)
    leads[np.cumsum(n_rows) - n_rows] = True
    classes = np.array([c for block in blocks for c in block], dtype=np.int64)
    flat = MachineColumns(*(np.concatenate([getattr(c, k) for c in columns])[col_of]
                            for k in ("share", "load", "pref")))
    arcs = costs.machine_arcs(_flat_rows(rows, classes[row_of]), flat, leads[row_of])
    cost, hold = arcs.cost, arcs.hold
    proxies: list[IntArray] = []
    out: list[MachineArcs] = []
    start = 0
    for r, c in zip(n_rows.tolist(), n_cols.tolist(), strict=True):
        proxies.append(cost[start:start + c])
        end = start + r * c
        out.append(MachineArcs(cost[start + c:end].reshape(r - 1, c),
                               None if hold is None else hold[start + c:end].reshape(r - 1, c)))
        start = end
    return proxies, out


def _pairs(n_rows: IntArray, n_cols: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """Blocks of rows against their columns as flat pairs, block after block and row after row: block b has
    `n_rows[b]` rows, each paired with the b-th run of `n_cols[b]` columns. Per pair its row and its
    column (in the blocks' rows and columns, each concatenated); and per row, its width."""
    width = np.repeat(n_cols, n_rows)  # per row, its block's width
    row_of = np.repeat(np.arange(len(width)), width)
    first_col = np.repeat(np.repeat(np.cumsum(n_cols) - n_cols, n_rows), width)  # its block's first column
    col_of = np.arange(len(row_of)) - np.repeat(np.cumsum(width) - width, width) + first_col
    return row_of, col_of, width


def class_costs(rows: ClassRows, shapes: list[list[int]], heads: list[MachineColumns], costs: CostModel
                ) -> list[MachineArcs]:
    """`costs.task_to_machine` of each shape's classes (`shapes`) against its head's machines (`heads`),
    one (classes × machines) matrix per shape, all in one call: the arcs as flat pairs (each class's row
    of its shape's columns), priced element by element as the matrices would be, and cut back into the
    matrices. A simulated round's phase 1 holds a few shapes of a few classes each, thousands of times a
    run, where each call's fixed cost (some forty numpy calls on a handful of elements) was the most of
    it. One shape (or none): its matrix directly."""
    if len(shapes) <= 1:
        return [costs.task_to_machine(_rows_of(rows, members), head)
                for members, head in zip(shapes, heads, strict=True)]
    classes = np.array([c for members in shapes for c in members], dtype=np.int64)
    n_rows = np.array([len(members) for members in shapes], dtype=np.int64)
    n_cols = np.array([len(head.share) for head in heads], dtype=np.int64)
    row_of, col_of, _ = _pairs(n_rows, n_cols)
    flat_rows = _flat_rows(rows, classes[row_of])
    flat_columns = MachineColumns(*(np.concatenate([getattr(h, k) for h in heads])[col_of]
                                    for k in ("share", "load", "pref")))
    arcs = costs.task_to_machine(flat_rows, flat_columns)
    cost = arcs.cost.ravel()
    hold = None if arcs.hold is None else arcs.hold.ravel()
    ends = np.cumsum(n_rows * n_cols).tolist()
    out: list[MachineArcs] = []
    for start, end, r, c in zip([0, *ends[:-1]], ends, n_rows.tolist(), n_cols.tolist(), strict=True):
        out.append(MachineArcs(cost[start:end].reshape(r, c), None if hold is None else hold[start:end].reshape(r, c)))
    return out


def _surcharges(pricing: Pricing, rows: ClassRows, costs: CostModel) -> None:
    """What going remote costs each class that wants devices and has machines (`rows`; the spill arc is
    priced at their median), for all of them at once rather than shape by shape: a class's surcharge is
    its own (row by row), and the median does not depend on their order."""
    if len(rows.tau):
        found = costs.remote_surcharge(rows)
        if found is not None:
            pricing.surcharges.extend(found.tolist())


def _local_tasks(rep: RoundJob, free_at: dict[str, IntArray], n: int) -> IntArray:
    """Per machine class, how many tasks of the shape one of its machines serves with its own devices."""
    out: IntArray | None = None  # (NEVER // 4 where it wants no device: np.iinfo is a class made at each call)
    for kind, want in rep.wants.items():
        served = free_at[kind] // want if kind in free_at else np.zeros(n, dtype=np.int64)
        out = np.minimum(served, NEVER // 4) if out is None else np.minimum(out, served)
    return np.full(n, NEVER // 4, dtype=np.int64) if out is None else out


def _shape_fit(state: FreeState, cls: Classes, members: list[int], rep: RoundJob, costs: CostModel,
               local_free: dict[str, IntArray], pricing: Pricing, known: dict[int, IntArray] | None = None) -> IntArray:
    """Per machine, how many tasks of the shape it can take (`shape_fit`; `known`: found already)."""
    fit = None if known is None else known.get(id(rep.shape))
    if fit is None:
        fit = shape_fit(state, rep, costs, local_free, min(cls.representative[c].gbps for c in members))
    pricing.fit[id(rep.shape)] = fit
    if id(rep.shape) not in pricing.first_fit:
        pricing.first_fit[id(rep.shape)] = int(fit.sum())
    return fit


def shape_fit(state: FreeState, rep: RoundJob, costs: CostModel, local_free: dict[str, IntArray],
              min_gbps: float) -> IntArray:
    """Per machine, how many tasks of `rep`'s shape it can take (the cost model's capacity at `min_gbps`,
    the least any class of the shape draws; local devices only on a second try that asks for them, one
    task fewer where a second try avoids a machine)."""
    fit = (local_capacity(state, rep, local_free) if rep.local_first else
           costs.task_to_machine_capacity(state, rep, local_free, min_gbps))
    if rep.avoid:  # its second try: one task fewer on the machine that failed it (flow.py)
        fit = fit.copy()
        np.subtract.at(fit, list(rep.avoid), 1)
        fit = np.maximum(fit, 0)
    return fit


def shape_representative(cls: Classes, members: list[int]) -> int:
    """The class a shape's machines are priced for (its aggregator's arcs): its first class in queue
    order whose goal a local placement meets. A class whose SLO no machine meets (a tenant's τ of one
    second) must not price the shape's machines for the others (one such class would hold every job of
    its shape); when no class's goal is met, the loosest. (Pricing every shape for its loosest goal, as
    741bd7c did, priced the aggregator's machines for the job that minds remote devices least: tasks of
    tighter classes then went remote through it, the small pools ran out, and at 12,500 machines and
    10,000 queued the round placed 9,679 jobs in three phase-1 solves instead of 9,997 in one.)"""
    reps = cls.representative
    for c in members:
        if reps[c].phi_local <= reps[c].tau:
            return c
    return max(members, key=lambda c: (reps[c].tau, -c))


def _price_classes(pricing: Pricing, g: int, members: list[int], cls: Classes, cand: Candidates, head: Candidates,
                   arcs: MachineArcs) -> None:
    """All classes of one shape at once: one row per class, one column per machine of the shape's head
    (its cheapest machines; `arcs`: their costs, `class_costs`). A class's offset to X and its preferred
    machines come from there. A shape of one class (most: each second try has a shape of its own):
    `_price_one_class`."""
    if len(members) == 1 and arcs.cost.shape[1] > 0:
        _price_one_class(pricing, g, members[0], cls, cand, head, arcs)
        return
    ids = np.array(members, dtype=np.int64)
    cost = arcs.cost
    masked = cost
    if cost.shape[1] == 0:  # (no machine in the head: no arc at all; `price` prices no such shape)
        return
    offsets = (cost - head.proxy[None, :]).max(axis=1, initial=_INT64_MIN)
    tasks = cls.tasks[ids]
    pricing.to_shape.add(ids, np.full(len(ids), g, dtype=np.int64), tasks, np.maximum(offsets, 0))
    # Per-row gathers and scatters as fancy indexing with this row index (what take_along_axis and
    # put_along_axis do, without their Python wrappers: this runs once per shape, thousands a run).
    row = np.arange(len(ids))[:, None]
    n_pref = min(PREFERRED, masked.shape[1])
    if n_pref < masked.shape[1]:
        top = np.argpartition(masked, n_pref - 1, axis=1)[:, :n_pref]
    else:
        top = np.arange(masked.shape[1])[None, :].repeat(len(ids), axis=0)
    top_cost = masked[row, top]
    # A class's own arcs reach PREFERRED machines in all (its cheapest classes' first
    # machines), each class's arc carrying what that many of its machines take with their own devices
    # (as the per-machine network's arcs to PREFERRED machines did: more, and the classes would crowd
    # into their favourite machine classes and spill to remote devices).
    nodes = head.machines[top]
    size = cand.size[nodes]
    by_cost = top_cost.argsort(axis=1, kind="stable")
    sorted_size = size[row, by_cost]
    before = np.empty_like(size)
    before[row, by_cost] = sorted_size.cumsum(axis=1) - sorted_size
    machines = np.minimum(np.maximum(PREFERRED - before, 0), size)  # np.clip(PREFERRED - before, 0, size)
    per_machine = cand.fit[nodes] // np.maximum(size, 1)
    per_machine = np.where(size > 1, np.minimum(per_machine, np.maximum(cand.local[nodes], 1)), per_machine)
    caps = np.minimum(per_machine * machines, tasks[:, None])
    # An arc of its own to a class of several machines only for a class that the aggregator prices above
    # its own cost somewhere (a positive offset); the others pay the shape's price through X there. (Such
    # an arc reaches a whole class of machines: loose classes crowded into their favourite ones, past
    # what their own devices serve, and spilled to remote devices: 570 -> 1,160-2,300 at 12,500
    # machines.) A single machine is as the per-machine network had it.
    keep = (top_cost < NEVER) & (caps > 0) & ((offsets > 0)[:, None] | (size == 1))
    rows_at = ids[np.nonzero(keep)[0]]  # each kept arc's class, in row-major order as keep's mask gives them
    pricing.preferred.add(rows_at, nodes[keep], caps[keep], top_cost[keep])
    pricing.min_cost[ids] = masked.min(axis=1)
    if arcs.hold is not None:
        held = (arcs.hold > 0).any(axis=1)
        pricing.min_unheld[ids[held]] = (cost - arcs.hold)[held].min(axis=1)


def _price_one_class(pricing: Pricing, g: int, c: int, cls: Classes, cand: Candidates, head: Candidates,
                     arcs: MachineArcs) -> None:
    """`_price_classes` for a shape of one class `c` with a head of some machine: the same arcs in the
    same order, read off its one row with a few numpy calls (its offset, the partition, the gathers) and
    the rest in Python integers over its PREFERRED columns, where the matrix's steps were some thirty
    numpy calls on one row (a simulated run prices thousands of such shapes). The partition of a row
    alone is the matrix's row's (`argpartition` works row by row)."""
    row = arcs.cost[0]
    offset = int((row - head.proxy).max(initial=_INT64_MIN))
    tasks = int(cls.tasks[c])
    pricing.to_shape.add_rows([c], [g], [tasks], [max(offset, 0)])
    n_pref = min(PREFERRED, len(row))
    top = np.argpartition(row, n_pref - 1)[:n_pref] if n_pref < len(row) else np.arange(len(row))
    top_cost = row[top].tolist()
    at = head.machines[top]
    nodes, size = at.tolist(), cand.size[at].tolist()
    fit, local = cand.fit[at].tolist(), cand.local[at].tolist()
    before = [0] * n_pref  # per column, the machines of the cheaper columns before it (stable by cost)
    so_far = 0
    for k in sorted(range(n_pref), key=top_cost.__getitem__):
        before[k] = so_far
        so_far += size[k]
    kept: list[tuple[int, int, int]] = []  # (machine class, cap, cost), in column order
    for k in range(n_pref):
        n = size[k]
        per_machine = fit[k] // (n if n > 1 else 1)
        if n > 1:
            per_machine = min(per_machine, local[k] if local[k] > 1 else 1)
        cap = min(per_machine * min(max(PREFERRED - before[k], 0), n), tasks)
        if top_cost[k] < NEVER and cap > 0 and (offset > 0 or n == 1):
            kept.append((nodes[k], cap, top_cost[k]))
    if kept:
        machines, caps, costs = map(list, zip(*kept, strict=True))
        pricing.preferred.add_rows([c] * len(kept), machines, caps, costs)
    pricing.min_cost[c] = row.min()
    if arcs.hold is not None and (arcs.hold[0] > 0).any():
        pricing.min_unheld[c] = (row - arcs.hold[0]).min()


def fits_nowhere(state: FreeState, jobs: list[RoundJob], costs: CostModel, first_fit: dict[int, int],
                 known: dict[int, IntArray] | None = None) -> bool:
    """Phase 1 when no shape of `jobs` fits any machine: every job fails as the decoder would fail it
    (`explain`: the cost model offers it no machine), without a network, a solve or a decode; True then.
    False (nothing done) when some shape fits somewhere: the caller builds the network.

    A server-centric round whose free devices all sit in pools admits hundreds of jobs that no machine
    serves with its own devices, iteration after iteration (paper-128m-4096j under `firmament`: three
    quarters of its phase-1 jobs); their network has no arc but to U, and its flow says nothing the fits
    do not. A shape's fit is `_shape_fit`'s (its first job stands for it: the fit reads the request, and a
    second try's `local_first` or `avoid` has a shape of its own), at the least gbps of its jobs (of its
    classes, in `price`). Nothing is taken here, so the state each explanation reads is the same for all:
    the cost model's reason is asked once per request and gbps. `known`: where the fits it finds are kept,
    by shape (for `price`, in the same state, when some shape fits after all)."""
    # (Columns and sets, not a pass per job: a round sends hundreds of jobs here each iteration.)
    shapes = list(map(id, map(attrgetter("shape"), jobs)))
    gbps = list(map(attrgetter("gbps"), jobs))
    local_free: dict[str, IntArray] = {k: state.local_free(k) for k in state.kinds}
    if _first_shape_fits(state, jobs, shapes, gbps, costs, local_free, known):
        return False
    reps, least = _shape_groups(jobs, shapes, gbps)
    for shape, rep in reps.items():
        if rep.count < 1:  # (a job of no tasks is placed by the decoder: left to it)
            return False
        fit = shape_fit(state, rep, costs, local_free, least[shape])
        if known is not None:
            known[shape] = fit
        if fit.any():
            return False
    for shape in reps:
        first_fit.setdefault(shape, 0)
    keys = list(zip(map(id, map(attrgetter("job.tasks"), jobs)), gbps, strict=True))
    said = {key: costs.why_no_machine(state, js) for key, js in dict(zip(keys, jobs, strict=True)).items()}
    for js, key in zip(jobs, keys, strict=True):
        js.fail_as(state, said[key])
    return True


def _shape_groups(jobs: list[RoundJob], shapes: list[int], gbps: list[float]
                  ) -> tuple[dict[int, RoundJob], dict[int, float]]:
    """Per shape (`shapes`: each job's, by `id`), the job that stands for it (its last) and the least gbps
    of its jobs (`gbps`): what a shape's fit is worked out for. Over the distinct (shape, gbps) pairs, not
    job by job: a full cluster's phase 1 has thousands of jobs of a few shapes."""
    reps = dict(zip(shapes, jobs, strict=True))
    least: dict[int, float] = {}
    for shape, g in set(zip(shapes, gbps, strict=True)):
        if shape not in least or g < least[shape]:
            least[shape] = g
    return reps, least


def gangs_that_fit(state: FreeState, jobs: list[RoundJob], costs: CostModel, first_fit: dict[int, int],
                   known: dict[int, IntArray]) -> list[RoundJob]:
    """The jobs of `jobs` whose whole gang the machines can take now: the others fail here as the decoder
    would fail them, without going into phase 1's network. A shape's fit (`shape_fit`, at the least gbps of
    its jobs, kept in `known` for `price`) bounds how many of its tasks the decoder gives each machine, so a
    gang of more tasks than the machines take in all is never placed; in the network its flow took room a
    job behind it could use, and was then given back. On a drained server-centric cluster, three gangs
    that no machine's own devices could hold went into the three iterations of every round one after the
    other (re-admitted in turn) and took the one machine a small job fitted: it never ran (issue 23's
    liveness finding). The failure is the decoder's: short (`_gang_short`) when the gang never fitted in
    this round (`first_fit`), else contention (what fitted went to jobs ahead of it)."""
    reps, least = _shape_groups(jobs, list(map(id, map(attrgetter("shape"), jobs))),
                                list(map(attrgetter("gbps"), jobs)))
    local_free: dict[str, IntArray] | None = None
    short: dict[int, IntArray] = {}
    for shape, rep in reps.items():
        fit = known.get(shape)
        if fit is None:
            if local_free is None:
                local_free = {k: state.local_free(k) for k in state.kinds}
            fit = known[shape] = shape_fit(state, rep, costs, local_free, least[shape])
        if rep.count >= 1 and 0 < int(np.minimum(fit, rep.count).sum()) < rep.count:
            short[shape] = fit  # (one no machine takes at all has no arc but to U: the decoder says why)
    if not short:
        return jobs
    for shape, fit in list(short.items()):
        if first_fit.setdefault(shape, int(np.minimum(fit, reps[shape].count).sum())) >= reps[shape].count:
            del short[shape]  # (it fitted earlier in the round: the network decides, as for any contention)
    if not short:
        return jobs
    kept = []
    for js in jobs:
        fit = short.get(id(js.shape))
        if fit is None:
            kept.append(js)
        else:
            _gang_short(state, js, fit, costs)
    return kept


def _first_shape_fits(state: FreeState, jobs: list[RoundJob], shapes: list[int], gbps: list[float], costs: CostModel,
                      local_free: dict[str, IntArray], known: dict[int, IntArray] | None) -> bool:
    """`fits_nowhere`'s first look, at the first shape of `jobs` alone (by `id`, `shapes`; their gbps,
    `gbps`): whether it fits somewhere, as the full look finds it there (its last job stands for it, at
    the least gbps of its jobs; its fit kept in `known`), or a job of no tasks asks it (left to the
    decoder). Most phases have a shape that fits, usually the first: then the full look's dict and set
    over every job are not made. False: the full look decides."""
    if not jobs:
        return False
    first = shapes[0]
    mine = list(map(first.__eq__, shapes))
    rep = jobs[len(mine) - 1 - mine[::-1].index(True)]
    if rep.count < 1:
        return True
    least = gbps[0]
    for g in compress(gbps, mine):  # (as the full look takes the least: a NaN first stays)
        if g < least:
            least = g
    fit = shape_fit(state, rep, costs, local_free, least)
    if known is not None:
        known[first] = fit
    return bool(fit.any())


@dataclass
class PhaseOne:
    """The network of phase 1 and what the decoder reads back from its flows."""

    net: FlowNetwork
    cls: Classes
    pricing: Pricing
    u_cost: IntArray
    arcs: dict[str, tuple[IntArray, IntArray, IntArray, IntArray]]


def build(state: FreeState, jobs: list[RoundJob], costs: CostModel, min_candidates: int, queue_len: int,
          table: JobTable, first_fit: dict[int, int] | None = None, known: dict[int, IntArray] | None = None
          ) -> PhaseOne:
    """The network of phase 1 for `jobs`. `first_fit`: the round's per-shape fit in its first iteration
    (filled here the first time a shape is seen; it tells a gang that never fitted from one that lost out).
    `known`: shapes' fits found already in this state, by shape (`price`)."""
    cls = classify(jobs)
    pricing = price(state, cls, costs, min_candidates, first_fit, known, table)
    assert pricing.groups is not None
    n_machines, n_jobs, n_classes = len(pricing.groups.first), len(jobs), len(cls.representative)
    net = FlowNetwork()
    # The nodes in one block (each `add_nodes` grows the supplies by a copy): jobs, classes, shapes'
    # aggregators, machine classes, U, the sink.
    job0 = net.add_nodes(n_jobs + n_classes + len(cls.shapes) + n_machines + 2)
    class0 = job0 + n_jobs
    shape0 = class0 + n_classes
    mach0 = shape0 + len(cls.shapes)
    unsched = mach0 + n_machines
    sink = unsched + 1
    total = int(cls.counts.sum())
    net.supplies[job0:job0 + n_jobs] = cls.counts
    net.supplies[sink] = -total
    rows = JobTable.indices(jobs)
    u_cost = unscheduled(costs.task_to_unscheduled(table, rows, queue_len), table, rows)
    idx = np.arange(n_jobs, dtype=np.int64)
    net.add_arcs("job->class", job0 + idx, class0 + cls.of_job, cls.counts, 0)
    net.add_arcs("job->U", job0 + idx, unsched, cls.counts, u_cost)
    preferred = pricing.preferred.arrays()
    to_shape = pricing.to_shape.arrays()
    shared = pricing.shared.arrays()
    net.add_arcs("class->machine", class0 + preferred[0], mach0 + preferred[1], preferred[2], preferred[3])
    net.add_arcs("class->X", class0 + to_shape[0], shape0 + to_shape[1], to_shape[2], to_shape[3])
    net.add_arcs("X->machine", shape0 + shared[0], mach0 + shared[1], shared[2], shared[3])
    reached = np.zeros(n_machines, dtype=bool)
    reached[preferred[1]] = True
    reached[shared[1]] = True
    _machine_to_sink(net, state, cls, pricing, np.nonzero(reached)[0], mach0, sink, total)
    net.add_arcs("U->sink", [unsched], sink, [total], 0)
    return PhaseOne(net, cls, pricing, u_cost, {"preferred": preferred, "to_shape": to_shape, "shared": shared})


def _machine_to_sink(net: FlowNetwork, state: FreeState, cls: Classes, pricing: Pricing,
                     used: IntArray, mach0: int, sink: int, total: int) -> None:
    """A machine's cpu and memory bound how many of the smallest tasks it takes (the decoder checks
    each task's real fit). Local devices are shared by every class that lands on a machine: tasks up
    to its free local devices go free, the rest pay what going remote costs a typical job. Nor does a
    machine take more tasks than the shape that fits it best could put there (the cost model's capacity:
    local devices, uplink): a class's own arc and its shape's aggregator may both lead to a machine,
    and each is bounded by that capacity alone."""
    # Every job of a class has its representative's request: the classes stand for the jobs here.
    reps = cls.representative
    cap = pricing.room = task_room(state, reps)
    if pricing.fit:
        cap = np.minimum(cap, reduce(np.maximum, pricing.fit.values()))
    groups = pricing.groups
    assert groups is not None
    machine_cap = np.minimum(np.maximum(cap, 0), total).astype(np.int64)  # np.clip(cap, 0, total)
    group_cap = np.minimum(groups.total(machine_cap), total)
    if not pricing.surcharges:
        net.add_arcs("machine->sink", mach0 + used, sink, group_cap[used], 0)
        return
    wants = np.array([sum(js.wants.values()) for js in reps], dtype=np.int64)[cls.of_job]
    # `np.average(wants, weights=cls.counts)` as it works it out (float64 products and sums), without
    # its Python wrapper; a zero weight sum raises ZeroDivisionError as it does.
    want_mean = max(1.0, float(np.multiply(wants, cls.counts, dtype=np.float64).sum())
                    / float(cls.counts.sum(dtype=np.float64)))
    # (A kind no machine has free adds zeros; with none at all, the zeros of one kind.)
    local_total = sum(state.local_free(k) for k in state.local_kinds or state.kinds[:1])
    slots = np.minimum(groups.total(np.minimum(np.floor(local_total / want_mean).astype(np.int64), machine_cap)),
                       group_cap)
    nodes, free_slots = mach0 + used, slots[used]
    net.add_arcs("machine->sink", nodes, sink, free_slots, 0)
    net.add_arcs("machine->sink:spill", nodes, sink, group_cap[used] - free_slots,
                 max(1, int(median(pricing.surcharges))))


def task_room(state: FreeState, reps: list[RoundJob]) -> FloatArray:
    """Per machine, how many of the smallest tasks of `reps` its free cpus and memory hold
    (`queue.task_room_for`; each phase 1 asks twice, building and splitting)."""
    return task_room_for(state, min(js.cpus for js in reps), min(js.memory_gb for js in reps))


def median(values: list[int]) -> float:
    """`np.median` of integers as it works it out (the middle one as a float64, or the float64 mean of
    the middle two), without its Python wrapper: each phase 1 of a round with devices asks it once, on a
    few surcharges, and numpy's took longer than sorting them."""
    ordered = sorted(values)
    half = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[half])
    return (float(ordered[half - 1]) + float(ordered[half])) / 2.0


def decode(state: FreeState, jobs: list[RoundJob], phase: PhaseOne, flows: IntArray, costs: CostModel
           ) -> list[RoundJob]:
    """Hand out machines in queue order; returns the jobs whose every task got one."""
    net, cls = phase.net, phase.cls
    to_class = flows[net.block("job->class")]
    pref, shared = phase.arcs["preferred"], phase.arcs["shared"]
    groups = phase.pricing.groups
    assert groups is not None
    f_pref, f_shared = flows[net.block("class->machine")], flows[net.block("X->machine")]
    # Per class its preferred machines with flow, then per shape its machines, cheapest first.
    if state.n_machines <= LIST_SPLIT_MAX:
        todo = _capped_arcs(len(groups.first), cls, phase.pricing, pref, shared, f_pref, f_shared)
        by_class, by_shape = _split_lists(state, cls, phase.pricing, todo)
    else:
        f_pref, f_shared = within_capacity(len(groups.first), cls, phase.pricing, pref, shared, f_pref, f_shared)
        by_class, by_shape = split(state, cls, phase.pricing, pref, f_pref, shared, f_shared)
    direct = {c: Offers(x) for c, x in by_class.items()}
    common = {g: Offers(x) for g, x in by_shape.items()}
    shape_of = dict(zip(phase.arcs["to_shape"][0].tolist(), phase.arcs["to_shape"][1].tolist(), strict=True))
    # A class without flow on its own arcs (most) draws from its shape's list only. Looked up for the
    # classes whose jobs the flow placed (a full cluster's phase sends most of its classes to U).
    sources: dict[int, tuple[Offers, ...]] = {}
    survivors: list[RoundJob] = []
    take = state.take_cpu_along
    # Server-centric: a machine's local devices bound its tasks. The flow cannot see that (a class's own
    # arcs and its shape's may both send tasks to one machine, and shapes share a machine's devices).
    claims = LocalClaims(state) if costs.local_only else None
    allowed: dict[int, tuple[BoolArray, IntArray]] = {}
    # Each task gets a machine from the flow's lists (the class's own, then its shape's), checking the
    # real fit; a repair when the flow over-filled a machine; gang: all tasks or none. (One loop for
    # every job, no call per job: a round at 12,500 machines hands out some 12,000 tasks.)
    # (As lists: a full cluster's round explains hundreds of jobs, and numpy's scalar reads cost more.)
    pricing = phase.pricing
    min_cost, u_cost, min_unheld = pricing.min_cost.tolist(), phase.u_cost.tolist(), pricing.min_unheld.tolist()
    said: dict[int, tuple[Reason, str]] = {}
    for i, (js, c, sent, count) in enumerate(zip(jobs, cls.of_job.tolist(), to_class.tolist(), cls.counts.tolist(),
                                                 strict=True)):
        if sent < count:
            explain(state, js, min_cost[c], u_cost[i], costs, pricing, min_unheld[c], said)
            continue
        offered = sources.get(c)
        if offered is None:  # (the class's own offers, then its shape's, those it has: no generator per class)
            own, through = direct.get(c), common.get(shape_of.get(c, -1))
            offered = sources[c] = ((own,) if through is None else (own, through)) if own is not None else \
                (() if through is None else (through,))
        cpus, memory_gb, machines = js.cpus, js.memory_gb, js.machines
        for _ in range(count):
            if claims is not None:
                m = claims.take(offered, js, costs)
            else:
                m = take(offered, cpus, memory_gb, js, SCAN_LIMIT)
                if m < 0:
                    m = repair(state, js, costs, allowed, phase.pricing)
            if m < 0:
                if claims is not None:
                    claims.release(js)
                _lost(state, js, phase.pricing, costs)
                break
            machines.append(m)
        else:
            # (A job has no grants before this phase (`RoundJob.fail` drops them): a job of one task, most,
            # gets its entry in the list it has rather than a list of its own.)
            if count == 1 and not js.grants:
                js.grants.append(())
            else:
                js.grants = [()] * count
            survivors.append(js)
    return survivors


def within_capacity(n: int, cls: Classes, pricing: Pricing, pref: tuple[IntArray, ...], shared: tuple[IntArray, ...],
                    f_pref: IntArray, f_shared: IntArray) -> tuple[IntArray, IntArray]:
    """(Per machine class: `n` classes, `pricing.group_fit`.) The flows of the class → machine and X → machine
    arcs, cut so that no machine gets more tasks of
    a shape than the shape's capacity there (`pricing.fit`: cpus, memory, local devices, uplink). Each
    arc is bounded by it alone, and a class's own arcs, its twins' and its shape's aggregator may all
    lead to one machine; the flow cannot see that their sum is what the machine must carry. The classes'
    own arcs keep theirs first (in class order), the aggregator gets what is left."""
    if not len(f_pref) and not len(f_shared):
        return f_pref, f_shared
    class_shape = np.empty(len(cls.representative), dtype=np.int64)
    for g, members in enumerate(cls.shapes):
        class_shape[members] = g
    fit = np.stack([pricing.group_fit[id(cls.representative[members[0]].shape)] for members in cls.shapes]).ravel()
    key = class_shape[pref[0]] * n + pref[1]
    order = np.argsort(key, kind="stable")
    sk, sf = key[order], f_pref[order]
    before = np.cumsum(sf) - sf
    first = np.concatenate(([True], sk[1:] != sk[:-1]))
    before -= np.maximum.accumulate(np.where(first, before, 0))  # what the same key's earlier arcs took
    cut = f_pref.copy()
    cut[order] = np.minimum(sf, np.maximum(fit[sk] - before, 0))
    direct = np.bincount(key, weights=cut, minlength=len(fit))
    xkey = shared[0] * n + shared[1]
    cut_shared = np.minimum(f_shared, np.maximum(fit[xkey] - direct[xkey], 0)).astype(np.int64)
    return cut, cut_shared


def _class_shapes(cls: Classes) -> list[int]:
    """Per class, its shape's number."""
    out = [0] * len(cls.representative)
    for g, members in enumerate(cls.shapes):
        for c in members:
            out[c] = g
    return out


def _capped_arcs(n: int, cls: Classes, pricing: Pricing, pref: tuple[IntArray, ...], shared: tuple[IntArray, ...],
                 f_pref: IntArray, f_shared: IntArray) -> list[list[list[int]]]:
    """`within_capacity`'s cut and `split`'s arcs to split in one pass over the arcs with flow, in Python
    integers: per part (the classes' own arcs, the aggregators'), [tail, shape, machine class, cost, flow]
    of each arc whose cut flow is positive, in arc order. A small cluster's phase (`LIST_SPLIT_MAX`) has a
    few dozen arcs with flow, where the cut's twenty numpy calls over every arc cost more. As the cut: per
    (shape, machine class), a class's own arc carries what the shape's fit there leaves after the flows of
    the earlier arcs there (as the flow had them), the aggregator what the own arcs' cut flows leave."""
    class_shape = _class_shapes(cls)
    fits = [pricing.group_fit[id(cls.representative[members[0]].shape)] for members in cls.shapes]
    before: dict[int, int] = {}  # per (shape, machine class): the flows of its earlier own arcs
    direct: dict[int, int] = {}  # per (shape, machine class): what its own arcs carry once cut
    own: list[list[int]] = []
    nz = np.nonzero(f_pref)[0]
    for t, node, cost, f in zip(pref[0][nz].tolist(), pref[1][nz].tolist(), pref[3][nz].tolist(), f_pref[nz].tolist(),
                                strict=True):
        g = class_shape[t]
        key = g * n + node
        earlier = before.get(key, 0)
        before[key] = earlier + f
        cut = min(f, max(int(fits[g][node]) - earlier, 0))
        if cut:
            direct[key] = direct.get(key, 0) + cut
            own.append([t, g, node, cost, cut])
    through: list[list[int]] = []
    nz = np.nonzero(f_shared)[0]
    for g, node, cost, f in zip(shared[0][nz].tolist(), shared[1][nz].tolist(), shared[3][nz].tolist(),
                                f_shared[nz].tolist(), strict=True):
        cut = min(f, max(int(fits[g][node]) - direct.get(g * n + node, 0), 0))
        if cut:
            through.append([g, g, node, cost, cut])
    return [own, through]


def split(state: FreeState, cls: Classes, pricing: Pricing, pref: tuple[IntArray, ...], f_pref: IntArray,
          shared: tuple[IntArray, ...], f_shared: IntArray) -> tuple[OfferLists, OfferLists]:
    """The flows to machine classes split back over their machines, as the decoder's lists of them: per
    class its own arcs' machines with their tasks, per shape its aggregator's, cheapest first (as
    `flow_lists` orders the arcs to machines). The classes' own arcs first (in class order), then the aggregators';
    each takes a class's machines in order (`_Splitter`): first only as many tasks as a machine's own
    free devices serve (as the per-machine network's free machine → sink arc had it), then up to its fit.
    Flow that finds no machine left (shapes that fit differently sharing a class) is dropped: the
    decoder's repair finds those tasks a machine. (A large cluster's: the decoder splits a small one's
    in lists, `_capped_arcs` and `_split_lists`.)"""
    class_shape = _class_shapes(cls)
    parts = [(pref, f_pref, class_shape), (shared, f_shared, None)]
    todo: list[list[list[int]]] = []  # per part: [tail, shape, node, cost, flow left]
    for arcs, flows, shape_of in parts:
        nz = np.nonzero(flows)[0]
        todo.append([[t, shape_of[t] if shape_of is not None else t, node, cost, f] for t, node, cost, f in
                     zip(arcs[0][nz].tolist(), arcs[1][nz].tolist(), arcs[3][nz].tolist(), flows[nz].tolist(),
                         strict=True)])
    splitter = _Splitter(state, cls, pricing)
    out: list[list[tuple[int, IntArray, int, IntArray]]] = [[], []]
    for local_only in (True, False):
        for part, arcs_left in zip(out, todo, strict=True):
            for arc in arcs_left:
                if arc[4] > 0:
                    arc[4] = splitter.take(arc, local_only, part)

    def arrays(part: list[tuple[int, IntArray, int, IntArray]]) -> tuple[Arcs, IntArray]:
        if not part:
            empty = np.zeros(0, dtype=np.int64)
            return (empty, empty, empty, empty), empty
        sizes = [len(m) for _, m, _, _ in part]
        t = np.repeat(np.array([x[0] for x in part], dtype=np.int64), sizes)
        c = np.repeat(np.array([x[2] for x in part], dtype=np.int64), sizes)
        h = np.concatenate([x[1] for x in part])
        f = np.concatenate([x[3] for x in part])
        return (t, h, f, c), f

    (pref_m, f_pref_m), (shared_m, f_shared_m) = arrays(out[0]), arrays(out[1])
    return (flow_lists(pref_m[0], pref_m[1], pref_m[3], f_pref_m),
            flow_lists(shared_m[0], shared_m[1], shared_m[3], f_shared_m))


def _split_lists(state: FreeState, cls: Classes, pricing: Pricing, todo: list[list[list[int]]]
                 ) -> tuple[OfferLists, OfferLists]:
    """`split`'s passes over the arcs left to split (`todo`, per part) with `_ListSplitter`, and its lists
    made from them as they are (a few dozen arcs to machines: no arrays)."""
    splitter = _ListSplitter(state, cls, pricing)
    out: list[tuple[list[int], list[int], list[int], list[int]]] = [([], [], [], []), ([], [], [], [])]
    for local_only in (True, False):
        for part, arcs_left in zip(out, todo, strict=True):
            for arc in arcs_left:
                if arc[4] > 0:
                    arc[4] = splitter.take(arc, local_only, part)
    (pref, shared) = (_offer_lists(*part) for part in out)
    return pref, shared


def _offer_lists(tails: list[int], heads: list[int], flows: list[int], costs: list[int]) -> OfferLists:
    """`flow_lists` of arcs given as lists, every flow positive (the splitter's): per tail its [head,
    flow] pairs by cost, arcs of equal cost in the order given (as its stable sort by tail, then cost)."""
    out: OfferLists = {}
    for i in sorted(range(len(tails)), key=lambda i: (tails[i], costs[i])):
        found = out.get(tails[i])
        if found is None:
            found = out[tails[i]] = []
        found.append([heads[i], flows[i]])
    return out


def tasks_left(cap: FloatArray) -> IntArray:
    """How many more tasks each machine takes, from what its cpus and memory bound (`cap`, floats): as
    `np.clip(np.nan_to_num(cap, posinf=2**31), 0, 2**31)` (NaN: none; inf: 2**31), in three ufuncs
    rather than through their Python wrappers (each phase 1 of a round asks once)."""
    out: IntArray = np.where(cap != cap, 0, np.minimum(np.maximum(cap, 0), 2**31)).astype(np.int64)
    return out


class _Splitter:
    """What the machines of a round's machine classes have left while flows are split over them: tasks
    their cpus and memory hold (for the round's smallest task), tasks of each shape (its fit, less what
    the split gave it), and their own free devices per kind. Arrays over every machine: an arc's flow is
    handed over its class's machines at once."""

    def __init__(self, state: FreeState, cls: Classes, pricing: Pricing) -> None:
        assert pricing.groups is not None
        self.members = pricing.groups.member_arrays
        reps = [cls.representative[members[0]] for members in cls.shapes]
        #: Per shape, per machine: how many more of its tasks the machine takes (its fit, less those given).
        self.room = [pricing.fit[id(rep.shape)].astype(np.int64) for rep in reps]
        self.wants = [sorted(rep.wants.items()) for rep in reps]
        cap = task_room(state, cls.representative) if pricing.room is None else pricing.room
        self.left: IntArray = tasks_left(cap)
        self.local: dict[str, IntArray] = {k: state.local_free(k).astype(np.int64) for k in state.kinds}

    def take(self, arc: list[int], local_only: bool, out: list[tuple[int, IntArray, int, IntArray]]) -> int:
        """Hand the arc's flow to its machine class's machines, in their order, each as many tasks as it
        has room for (`local_only`: as its own free devices serve, too); returns the flow left over.
        Appends (tail, machines, cost, tasks) to `out`."""
        tail, shape, node, cost, f = arc
        members = self.members[node]
        room = self.room[shape]
        wants = [(self.local[kind], want) for kind, want in self.wants[shape]]
        if len(members) == 1:
            return self._take_one(arc, members, room, wants, local_only, out)
        fits = np.minimum(self.left[members], room[members])
        if local_only:
            for local, want in wants:
                fits = np.minimum(fits, local[members] // want)
        fits = np.maximum(fits, 0)
        before = np.cumsum(fits) - fits
        given = np.minimum(np.maximum(f - before, 0), fits)  # np.clip(f - before, 0, fits)
        at = np.nonzero(given)[0]
        if len(at) == 0:
            return f
        machines, n = members[at], given[at]
        self.left[machines] -= n
        room[machines] -= n
        for local, want in wants:
            local[machines] -= np.minimum(local[machines], n * want)
        out.append((tail, machines, cost, n))
        return f - int(n.sum())

    def _take_one(self, arc: list[int], members: IntArray, room: IntArray, wants: list[tuple[IntArray, int]],
                  local_only: bool, out: list[tuple[int, IntArray, int, IntArray]]) -> int:
        """`take` for a machine class of one machine (most of them, on a small cluster's rounds), in
        Python integers: the same steps without a dozen numpy calls on one-element arrays."""
        tail, _, _, cost, f = arc
        m = int(members[0])
        fit = min(int(self.left[m]), int(room[m]))
        if local_only:
            for local, want in wants:
                fit = min(fit, int(local[m]) // want)
        given = min(max(f, 0), max(fit, 0))
        if given == 0:
            return f
        self.left[m] -= given
        room[m] -= given
        for local, want in wants:
            local[m] -= min(int(local[m]), given * want)
        out.append((tail, members, cost, np.array([given], dtype=np.int64)))
        return f - given


class _ListSplitter:
    """`_Splitter` in Python lists, machine by machine, for a small cluster's rounds (`LIST_SPLIT_MAX`): a
    simulated round's machine classes hold a few machines each, where the splitter's dozen numpy calls
    per arc (on arrays of a few elements) cost more than walking them; its arcs' flows go to the same
    machines in the same amounts. (A large cluster's class may hold thousands of machines: `_Splitter`.)"""

    def __init__(self, state: FreeState, cls: Classes, pricing: Pricing) -> None:
        assert pricing.groups is not None
        #: The machine classes' machines in order, one list (class i: `order[bounds[i]:bounds[i + 1]]`).
        self.order, self.bounds = pricing.groups.member_arrays.lists()
        reps = [cls.representative[members[0]] for members in cls.shapes]
        self.room = [pricing.fit[id(rep.shape)].astype(np.int64, copy=False).tolist() for rep in reps]
        wants = [sorted(rep.wants.items()) for rep in reps]
        # (What the build worked out in this state, when it did: `_machine_to_sink`.)
        cap = task_room(state, cls.representative) if pricing.room is None else pricing.room
        self.left: list[int] = tasks_left(cap).tolist()
        # (Only the kinds some shape wants are ever read.)
        kinds = {kind for wanted in wants for kind, _ in wanted}
        self.local: dict[str, list[int]] = {k: state.local_free(k).astype(np.int64, copy=False).tolist() for k in kinds}
        #: Per shape, (its kind's free local devices per machine, how many a task wants) per kind it wants.
        self.wants = [[(self.local[kind], want) for kind, want in wanted] for wanted in wants]

    def take(self, arc: list[int], local_only: bool, out: tuple[list[int], list[int], list[int], list[int]]) -> int:
        """`_Splitter.take`, appending each machine's share to `out` (tails, machines, tasks, costs). (The
        least of two as a comparison, not `min`: tens of thousands of them a simulated run.)"""
        tail, shape, node, cost, f = arc
        left, room, wants, order = self.left, self.room[shape], self.wants[shape], self.order
        tails, machines, flows, costs = out
        for at in range(self.bounds[node], self.bounds[node + 1]):
            m = order[at]
            fit, r = left[m], room[m]
            if r < fit:
                fit = r
            if local_only:
                for local, want in wants:
                    r = local[m] // want
                    if r < fit:
                        fit = r
            if fit <= 0:
                continue
            n = fit if fit < f else f
            left[m] -= n
            room[m] -= n
            for local, want in wants:
                r, need = local[m], n * want
                local[m] = r - (need if need < r else r)
            tails.append(tail)
            machines.append(m)
            flows.append(n)
            costs.append(cost)
            f -= n
            if f <= 0:
                break
        return f


def _lost(state: FreeState, js: RoundJob, pricing: Pricing, costs: CostModel) -> None:
    """A job the flow sent machines for that did not get them all: its gang never fitted what was free
    when the round began (the flow over-counted a machine), or jobs ahead of it took them."""
    if pricing.first_fit.get(id(js.shape), js.count) < js.count:
        _gang_short(state, js, pricing.fit[id(js.shape)], costs)
    else:
        js.fail(state, Reason.CONTENTION, f"needs {request(js.job)}; the cpus and memory that fit "
                                          f"went to jobs ahead of it this round")


def repair(state: FreeState, js: RoundJob, costs: CostModel, allowed: dict[int, tuple[BoolArray, IntArray]],
           pricing: Pricing) -> int:
    """The flow's machines for this class are used up (several classes shared a machine): take the
    machine with the most free cpus that still fits the task, among those the cost model allows it
    (server-centric: those whose own free devices cover it; see also `LocalClaims.repair`) and where its
    shape could go at all (`pricing.fit`: a machine that neither holds nor can reach its devices would
    fail it in a device phase). `allowed` caches those machines per shape for the round."""
    cpus, memory_gb = js.cpus, js.memory_gb
    has_devices, cand = costs.machines_allowed(state, js)
    if has_devices is None:
        found = allowed.get(id(js.shape))
        if found is None:
            fit = pricing.fit.get(id(js.shape))
            mask = np.ones(state.n_machines, dtype=bool) if fit is None else fit > 0
            found = allowed[id(js.shape)] = (mask, np.nonzero(mask)[0])
        has_devices, cand = found
    # Usually the machine with the most free cpus fits: then it is the answer (argmax takes the first
    # of equals either way) without a mask over every machine.
    m = int(np.argmax(state.cpu))
    if (has_devices is None or has_devices[m]) and state.take_cpu(m, cpus, memory_gb, js):
        return m
    cpu = state.cpu[cand]
    ok = (cpu + EPS >= cpus) & (state.mem[cand] + EPS >= memory_gb)
    if not ok.any():
        return -1
    m = int(cand[np.argmax(np.where(ok, cpu, -np.inf))])
    return m if state.take_cpu(m, cpus, memory_gb, js) else -1


class LocalClaims:
    """Server-centric rounds: the local devices that the tasks handed a machine in this phase 1 will take
    there in the device phases, per kind. A task only gets a machine whose free local devices, less
    those claimed, still cover it."""

    def __init__(self, state: FreeState) -> None:
        self.state = state
        self.claimed: dict[str, IntArray] = {}
        self._free: dict[tuple[str, str | None], IntArray] = {}
        self._walks: dict[int, list[Any]] = {}

    def _local(self, kind: str, model: str | None) -> IntArray:
        found = self._free.get((kind, model))
        if found is None:
            found = self._free[(kind, model)] = self.state.local_free(kind, model)
        return found

    def fits(self, m: int, js: RoundJob) -> bool:
        models = js.job.tasks.models
        for kind, n in js.wants.items():
            claimed = self.claimed.get(kind)
            if self._local(kind, models.get(kind))[m] - (0 if claimed is None else claimed[m]) < n:
                return False
        return True

    def repair(self, js: RoundJob, costs: CostModel) -> int:
        """`repair` for a server-centric round: the machine the cost model allows with the most free cpus
        when the request first needed a repair this round whose cpus and unclaimed devices still fit the
        task. Each request walks its list once (a machine that no longer fits never will again this
        round: cpus and devices only fill up), so a round of thousands of repairs stays linear."""
        state = self.state
        walk = self._walks.get(id(js.shape))
        if walk is None:
            _, cand = costs.machines_allowed(state, js)
            walk = self._walks[id(js.shape)] = [cand[np.argsort(-state.cpu[cand], kind="stable")].tolist(), 0]
        order = walk[0]
        while walk[1] < len(order):
            m = order[walk[1]]
            if self.fits(m, js) and state.take_cpu(m, js.cpus, js.memory_gb, js):
                return int(m)
            walk[1] += 1
        return -1

    def take(self, offered: tuple[Offers, ...], js: RoundJob, costs: CostModel) -> int:
        """A machine for one task of `js` along the flow's offers (then the repair), with its cpus taken and
        its local devices claimed; -1 when none has both."""
        state = self.state
        m = -1
        for offers in offered:
            entries = offers.entries
            while offers.start < len(entries) and entries[offers.start][1] == 0:
                offers.start += 1
            for offer in entries[offers.start:offers.start + SCAN_LIMIT]:
                if offer[1] == 0:
                    continue
                # Offers are per request: a machine too full (of cpus, or of unclaimed devices) for this
                # task is too full for the rest of its offers this round (they only fill up).
                if not self.fits(offer[0], js) or not state.take_cpu(offer[0], js.cpus, js.memory_gb, js):
                    offer[1] = 0
                    continue
                offer[1] -= 1
                m = offer[0]
                break
            if m >= 0:
                break
        else:
            m = self.repair(js, costs)
        if m >= 0:
            for kind, n in js.wants.items():
                claimed = self.claimed.get(kind)
                if claimed is None:
                    claimed = self.claimed[kind] = np.zeros(state.n_machines, dtype=np.int64)
                claimed[m] += n
        return m

    def release(self, js: RoundJob) -> None:
        """A job that failed its gang gives back the devices its tasks claimed."""
        for m in js.machines:
            for kind, n in js.wants.items():
                self.claimed[kind][m] -= n


def explain(state: FreeState, js: RoundJob, best: int, u_cost: int, costs: CostModel,
            pricing: Pricing | None = None, unheld: int = NEVER, said: dict[int, tuple[Reason, str]] | None = None
            ) -> None:
    """Why the flow sent (some of) a job's tasks to U: the cost model offered it no machine, waiting
    was cheaper (only because of the SLO's postponement: `unheld`, its best cost without it), its gang
    does not fit in what was free when the round began, or jobs ahead of it took what fits. `said`: the
    contention failures said so far, by request (`id` of the job's `TaskRequest`; the decoder's, for one
    phase: a full cluster's phase explains hundreds of jobs asking the same few things, and its jobs
    share the failure)."""
    if best == NEVER:
        js.fail(state, *costs.why_no_machine(state, js))
    elif best >= u_cost > unheld:
        js.fail(state, Reason.SLO_AT_RISK, (
            f"its placements would miss the SLO ({js.goal()}) under the current network load by more than "
            f"waiting costs at W={js.wait_rounds} (cost {best / SCALE:.3f} ≥ {u_cost / SCALE:.3f}); postponed"))
    elif best >= u_cost:
        js.fail(state, Reason.POSTPONED, f"waiting costs less than its best placement (cost {best / SCALE:.3f} ≥ "
                                         f"{u_cost / SCALE:.3f}, W={js.wait_rounds}); postponed")
    elif pricing is not None and pricing.first_fit.get(id(js.shape), js.count) < js.count:
        # Not contention: the machines could not take the whole gang before any job of the round took anything.
        _gang_short(state, js, pricing.fit[id(js.shape)], costs)
    else:
        failure = None if said is None else said.get(id(js.job.tasks))
        if failure is None:
            failure = (Reason.CONTENTION,
                       f"needs {request(js.job)}; what fits went to jobs ahead of it in the queue this round")
            if said is not None:
                said[id(js.job.tasks)] = failure
        js.fail_as(state, failure)


def _gang_short(state: FreeState, js: RoundJob, fit: IntArray, costs: CostModel) -> None:
    """Fail a job whose gang only partly fits what is free (`fit`: its shape's tasks per machine), naming
    how many of its tasks the machines take and where; short of cpus and memory, or (server-centric: where
    the devices are) of devices."""
    state.rollback(js)  # what its first tasks took is not what the machines have free
    by_cpu = task_fit_counts(state, js.cpus, js.memory_gb)
    reason = Reason.NO_DEVICES if int(by_cpu.sum()) >= js.count else Reason.NO_CAPACITY
    if costs.local_only and js.wants:
        by_devices = np.min([state.local_free(k, js.job.tasks.models.get(k)) // n for k, n in js.wants.items()],
                            axis=0)
        reason = Reason.NO_CAPACITY if int(by_devices.sum()) >= js.count else Reason.NO_DEVICES
    js.fail(state, reason, gang_shortfall(state, js.job, fit, costs.local_only))
