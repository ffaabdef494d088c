"""The vectorised steps of a flow round against the plain code they replaced: `phase_one._Splitter` (an
arc's flow over its machine class's machines at once), `MachineGroups.of` (packed keys) and `order_queue`."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from disagg.placement.phase_one import Spans, _ListSplitter, _Splitter


def _plain(members: list[list[int]], room: list[list[int]], wants: list[list[tuple[str, int]]], left: list[int],
           local: dict[str, list[int]], arcs: list[list[int]]) -> list[tuple[int, int, int, int]]:
    """Both passes (local devices only, then up to the fit) over `arcs` [tail, shape, node, cost, flow],
    one machine at a time: what the splitter did before it was vectorised."""
    out: list[tuple[int, int, int, int]] = []
    for local_only in (True, False):
        for arc in arcs:
            tail, shape, node, cost, f = arc
            for m in members[node]:
                if f <= 0:
                    break
                r = min(left[m], room[shape][m])
                if local_only:
                    for kind, want in wants[shape]:
                        r = min(r, local[kind][m] // want)
                if r <= 0:
                    continue
                n = min(r, f)
                left[m] -= n
                room[shape][m] -= n
                for kind, want in wants[shape]:
                    local[kind][m] -= min(local[kind][m], n * want)
                f -= n
                out.append((tail, m, cost, n))
            arc[4] = f
    return out


@st.composite
def _cases(draw: st.DrawFn) -> tuple[object, ...]:
    n_machines = draw(st.integers(1, 12))
    order = draw(st.permutations(list(range(n_machines))))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, n_machines - 1)), max_size=3)))
    members = [list(order[a:b]) for a, b in zip([0, *cuts], [*cuts, n_machines], strict=True) if a < b]
    n_shapes = draw(st.integers(1, 3))
    room = [draw(st.lists(st.integers(-1, 5), min_size=n_machines, max_size=n_machines)) for _ in range(n_shapes)]
    wants = [draw(st.lists(st.tuples(st.sampled_from(["gpu", "nvme"]), st.integers(1, 3)), max_size=2,
                           unique_by=lambda w: w[0])) for _ in range(n_shapes)]
    left = draw(st.lists(st.integers(0, 8), min_size=n_machines, max_size=n_machines))
    local = {k: draw(st.lists(st.integers(0, 6), min_size=n_machines, max_size=n_machines)) for k in ("gpu", "nvme")}
    arcs = draw(st.lists(st.tuples(st.integers(0, 5), st.integers(0, n_shapes - 1),
                                   st.integers(0, len(members) - 1), st.integers(0, 100), st.integers(1, 12)),
                         max_size=6))
    return members, room, wants, left, local, [list(a) for a in arcs]


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_the_vectorised_split_hands_out_what_the_machine_by_machine_walk_did(case: tuple[object, ...]) -> None:
    members, room, wants, left, local, arcs = case
    assert isinstance(members, list) and isinstance(room, list) and isinstance(wants, list)
    assert isinstance(left, list) and isinstance(local, dict) and isinstance(arcs, list)
    splitter = object.__new__(_Splitter)
    splitter.members = [np.array(m, dtype=np.int64) for m in members]
    splitter.room = [np.array(r, dtype=np.int64) for r in room]
    splitter.wants = [sorted(w) for w in wants]
    splitter.left = np.array(left, dtype=np.int64)
    splitter.local = {k: np.array(v, dtype=np.int64) for k, v in local.items()}
    mine = [list(a) for a in arcs]
    got: list[tuple[int, np.ndarray, int, np.ndarray]] = []
    for local_only in (True, False):
        for arc in mine:
            if arc[4] > 0:
                arc[4] = splitter.take(arc, local_only, got)
    flat = [(t, int(m), c, int(n)) for t, ms, c, ns in got for m, n in zip(ms, ns, strict=True)]
    plain_room, plain_left, plain_local = [list(r) for r in room], list(left), {k: list(v) for k, v in local.items()}
    expected = _plain(members, plain_room, [sorted(w) for w in wants], plain_left, plain_local, arcs)
    assert flat == expected
    assert [a[4] for a in mine] == [a[4] for a in arcs]  # the flow each arc has left over
    assert splitter.left.tolist() == plain_left and [r.tolist() for r in splitter.room] == plain_room
    assert {k: v.tolist() for k, v in splitter.local.items()} == plain_local


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_the_list_split_hands_out_what_the_machine_by_machine_walk_did(case: tuple[object, ...]) -> None:
    """`_ListSplitter` (a small cluster's) hands out what the walk did, and keeps what is left as it did."""
    members, room, wants, left, local, arcs = case
    assert isinstance(members, list) and isinstance(room, list) and isinstance(wants, list)
    assert isinstance(left, list) and isinstance(local, dict) and isinstance(arcs, list)
    splitter = object.__new__(_ListSplitter)
    order = np.array([m for ms in members for m in ms], dtype=np.int64)
    splitter.order, splitter.bounds = Spans(order, [0, *np.cumsum([len(ms) for ms in members]).tolist()]).lists()
    splitter.room = [list(r) for r in room]
    splitter.left = list(left)
    splitter.local = {k: list(v) for k, v in local.items()}
    splitter.wants = [[(splitter.local[k], n) for k, n in sorted(w)] for w in wants]
    mine = [list(a) for a in arcs]
    got: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
    for local_only in (True, False):
        for arc in mine:
            if arc[4] > 0:
                arc[4] = splitter.take(arc, local_only, got)
    flat = list(zip(got[0], got[1], got[3], got[2], strict=True))
    plain_room, plain_left, plain_local = [list(r) for r in room], list(left), {k: list(v) for k, v in local.items()}
    expected = _plain(members, plain_room, [sorted(w) for w in wants], plain_left, plain_local, arcs)
    assert flat == expected
    assert [a[4] for a in mine] == [a[4] for a in arcs]
    assert splitter.left == plain_left and splitter.room == plain_room and splitter.local == plain_local


def _groups_plain(columns: list[np.ndarray], rack: np.ndarray) -> tuple[list[int], list[int], list[list[int]]]:
    """`MachineGroups.of` as it was before its columns were packed into keys: a lexsort by every column."""
    key = np.column_stack(columns)
    order = np.lexsort(key.T[::-1])
    rows = key[order]
    starts = np.r_[True, (rows[1:] != rows[:-1]).any(axis=1)]
    first = order[starts]
    of_machine = np.empty(len(order), dtype=np.int64)
    of_machine[order] = np.cumsum(starts) - 1
    by_rack = np.lexsort((rack, of_machine))
    cell = of_machine[by_rack] * (int(rack.max(initial=0)) + 1) + rack[by_rack]
    starts = np.r_[0, np.nonzero(cell[1:] != cell[:-1])[0] + 1]
    rank = np.arange(len(cell)) - np.repeat(starts, np.diff(np.r_[starts, len(cell)]))
    order = by_rack[np.lexsort((rack[by_rack], rank, of_machine[by_rack]))]
    bounds = np.cumsum(np.bincount(of_machine, minlength=len(first)))[:-1]
    return of_machine.tolist(), first.tolist(), [m.tolist() for m in np.split(order, bounds)]


_FLOATS = st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.5, 1e-9, float("inf"), float("nan")])


@st.composite
def _machine_columns(draw: st.DrawFn) -> tuple[list[np.ndarray], np.ndarray]:
    n = draw(st.integers(1, 30))
    columns: list[np.ndarray] = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            columns.append(np.array(draw(st.lists(_FLOATS, min_size=n, max_size=n)), dtype=np.float64))
        else:
            top = draw(st.sampled_from([1, 3, 2**40, 2**61, 2**62]))
            columns.append(np.array(draw(st.lists(st.integers(-top, top), min_size=n, max_size=n)), dtype=np.int64))
    rack = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    return columns, rack


@settings(max_examples=300, deadline=None)
@given(_machine_columns())
def test_machine_classes_from_packed_keys_are_those_of_a_sort_by_every_column(
        case: tuple[list[np.ndarray], np.ndarray]) -> None:
    from disagg.placement.phase_one import MachineGroups

    columns, rack = case
    groups = MachineGroups.of(columns, rack)
    of_machine, first, members = _groups_plain(columns, rack)
    assert groups.of_machine.tolist() == of_machine and groups.first.tolist() == first
    assert groups.members == members and [m.tolist() for m in groups.member_arrays] == members


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, -0.0, 1.0, 1.5, -3.0, 1e300, float("inf"), float("nan")]),
                          st.sampled_from(["a", "b", "c"])), max_size=12))
def test_queue_order_is_pythons_sort_by_submit_time_then_name(submits: list[tuple[float, str]]) -> None:
    from operator import attrgetter

    from disagg.model import Job, TaskRequest
    from disagg.placement.queue import order_queue

    queue = [Job(name=f"{name}{i}", image="x", tasks=TaskRequest(), submit_s=t) for i, (t, name) in enumerate(submits)]
    by_time = sorted(queue, key=attrgetter("submit_s"))
    times = [j.submit_s for j in by_time]
    expected = by_time if len(set(times)) == len(times) else sorted(by_time, key=attrgetter("submit_s", "name"))
    assert [j.name for j in order_queue(queue, 0.0)] == [j.name for j in expected]


@settings(max_examples=200, deadline=None)
@given(_machine_columns())
def test_sorted_rows_order_machines_as_the_per_column_keys(case: tuple[list[np.ndarray], np.ndarray]) -> None:
    """`_sorted_rows` (the columns as one float array, one lexsort) orders and ties the machines as the
    per-column keys do, wherever it answers; and it answers for the usual columns (no NaN, small values)."""
    from disagg.placement import phase_one

    columns, _ = case
    found = phase_one._sorted_rows(columns)
    usual = all(not np.isnan(c).any() and (np.abs(c) < 2.0**53).all() for c in columns)
    assert (found is not None) == usual
    if found is None:
        return
    keys = phase_one._row_keys(columns)
    order = np.lexsort(keys[::-1])
    assert found[0].tolist() == order.tolist()
    packed = np.column_stack(keys)[order]
    assert found[1].tolist() == [True, *(packed[1:] != packed[:-1]).any(axis=1).tolist()]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-2**62, 2**62) | st.integers(-5, 5), min_size=1, max_size=12))
def test_phase_one_median_is_numpys(values: list[int]) -> None:
    """The spill arc's price reads `phase_one.median` where it read `np.median`: the same float."""
    from disagg.placement.phase_one import median

    assert median(values) == float(np.median(values))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 1.0, 3.0, -2.0, 2.0**31, 2.0**40, float("inf"), float("-inf"),
                                 float("nan")]), max_size=10))
def test_tasks_left_is_numpys_clip_of_nan_to_num(values: list[float]) -> None:
    """The splitter's room per machine (`phase_one.tasks_left`) is what the numpy wrappers it replaced gave."""
    from disagg.placement.phase_one import tasks_left

    cap = np.array(values, dtype=np.float64)
    want = np.clip(np.nan_to_num(cap, posinf=2**31), 0, 2**31).astype(np.int64)
    assert tasks_left(cap).tolist() == want.tolist()


_BIG = int(np.iinfo(np.int64).max)


@st.composite
def _one_class_rows(draw: st.DrawFn) -> tuple[object, ...]:
    """A shape's head of `w` machine classes and one class's row of costs over it (ties, NEVER, holds)."""
    w = draw(st.integers(1, 20))
    ints = st.integers(0, 6)
    # (A NEVER in the row makes its offset to X huge: half the rows have none.)
    never = st.one_of(st.integers(0, 40), st.just(_BIG)) if draw(st.booleans()) else st.integers(0, 40)
    cost = draw(st.lists(never, min_size=w, max_size=w))
    # (The shape's price near the class's own, so that the offset is as often 0 or below as above.)
    shift = draw(st.lists(st.integers(-2, 4), min_size=w, max_size=w))
    proxy = [40 if c == _BIG else c + d for c, d in zip(cost, shift, strict=True)]
    hold = draw(st.one_of(st.none(), st.lists(st.integers(0, 3), min_size=w, max_size=w)))
    size = draw(st.lists(st.integers(0, 5), min_size=w, max_size=w))
    fit = draw(st.lists(st.integers(0, 12), min_size=w, max_size=w))
    local = draw(st.lists(st.one_of(ints, st.just(_BIG // 4)), min_size=w, max_size=w))
    return cost, proxy, hold, size, fit, local, draw(st.integers(1, 9))


@settings(max_examples=400, deadline=None)
@given(_one_class_rows())
def test_a_shape_of_one_class_is_priced_as_its_row_of_the_matrix(case: tuple[object, ...]) -> None:
    """`phase_one._price_one_class` (a shape of one class, in Python integers) against `_price_classes`'s
    matrix for the same row: class 1 of a shape of two classes whose rows are the same."""
    from disagg.placement.cost_models import MachineArcs, MachineColumns
    from disagg.placement.phase_one import Candidates, Classes, Pricing, _price_classes

    cost, proxy, hold, size, fit, local, tasks = case
    w = len(cost)  # type: ignore[arg-type]
    zeros = np.zeros(w)
    cand = Candidates(np.arange(w, dtype=np.int64), np.array(fit, dtype=np.int64), MachineColumns(zeros, zeros, zeros),
                      np.array(proxy, dtype=np.int64), np.array(size, dtype=np.int64), np.array(local, dtype=np.int64))
    cls = Classes(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.array([tasks, tasks], dtype=np.int64),
                  [], [[0, 1]])

    def priced(members: list[int]) -> Pricing:
        rows = len(members)
        arcs = MachineArcs(np.array([cost] * rows, dtype=np.int64),
                           None if hold is None else np.array([hold] * rows, dtype=np.int64))
        out = Pricing(min_cost=np.full(2, -1, dtype=np.int64), min_unheld=np.full(2, -1, dtype=np.int64))
        _price_classes(out, 3, members, cls, cand, cand, arcs)
        return out

    alone, matrix = priced([1]), priced([0, 1])
    for buffer in ("preferred", "to_shape"):
        one = getattr(alone, buffer).arrays()
        both = getattr(matrix, buffer).arrays()
        mine = both[0] == 1
        assert all(np.array_equal(a, b[mine]) for a, b in zip(one, both, strict=True))
    assert (alone.min_cost[1], alone.min_unheld[1]) == (matrix.min_cost[1], matrix.min_unheld[1])


@settings(max_examples=200, deadline=None)
@given(_machine_columns(), st.lists(st.integers(0, 6), max_size=3))
def test_a_column_of_zeros_changes_no_machine_class(case: tuple[list[np.ndarray], np.ndarray], at: list[int]) -> None:
    """`price` leaves out the local devices of kinds no machine has free (`FreeState.local_kinds`): a
    column of zeros, wherever it stands, tells no machines apart and orders none."""
    from disagg.placement.phase_one import MachineGroups

    columns, rack = case
    padded = list(columns)
    for i in at:
        padded.insert(min(i, len(padded)), np.zeros(len(rack), dtype=np.int64))
    a, b = MachineGroups.of(columns, rack), MachineGroups.of(padded, rack)
    assert (a.of_machine.tolist(), a.first.tolist(), a.members) == (b.of_machine.tolist(), b.first.tolist(), b.members)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 20), st.integers(1, 5), st.integers(0, 3)), max_size=20))
def test_offer_lists_of_lists_are_flow_lists_of_the_arrays(arcs: list[tuple[int, int, int, int]]) -> None:
    """`phase_one._offer_lists` (a small cluster's split, its arcs as lists) orders and groups the arcs as
    `flow_lists` does the same arcs as arrays (ties of cost in the order given)."""
    from disagg.placement.jobstate import flow_lists
    from disagg.placement.phase_one import _offer_lists

    tails, heads, flows, costs = ([a[k] for a in arcs] for k in range(4))
    got = _offer_lists(tails, heads, flows, costs)
    want = flow_lists(*(np.array(x, dtype=np.int64) for x in (tails, heads, costs, flows)))
    assert got == want and list(got) == list(want)


_PROFILE_FLOATS = st.one_of(st.floats(1e-6, 1e6), st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0]))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_PROFILE_FLOATS, st.floats(0.0, 1.0), st.floats(0.5, 10.0), st.floats(0.0, 5.0),
                          st.one_of(st.floats(1e-3, 1e9), st.sampled_from([1e-3, 1.0, 1.5, 3.0, 1e9])),
                          st.one_of(st.floats(1.0, 10.0), st.sampled_from([1.0, 5.0, 10.0]))),
                min_size=1, max_size=12),
       st.booleans())
def test_remote_surcharge_one_by_one_is_the_arrays(rows: list[tuple[float, ...]], tau_at_base: bool) -> None:
    """A few classes' surcharges priced one by one in Python floats (`surcharge1`, the path of
    `DRMaestroCostModel.remote_surcharge` up to `SURCHARGE_LIST_MAX` classes) are the arrays' integers
    (`remote_surcharges`), a goal at the local time or a multiple of it (the ties of φ and τ) included."""
    from disagg.placement.cost_models import ClassRows, DRMaestroCostModel, remote_surcharges

    if tau_at_base:  # τ a multiple of the local time: φ = τ exactly at some share
        rows = [(b, t, f, s, b * m if b > 0 else tau, z) for (b, t, f, s, tau, z), m in
                zip(rows, [1.0, 1.5, 2.0, 0.5] * 3, strict=False)]
    base, transfer, factor, sens, tau, z = (np.array(c, dtype=np.float64)[:, None] for c in zip(*rows, strict=True))
    class_rows = ClassRows((base, transfer, factor, sens), tau, z, base, np.zeros_like(base, dtype=np.int64))
    assert DRMaestroCostModel().remote_surcharge(class_rows).tolist() == remote_surcharges(class_rows).tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-1.0, 64.0), st.floats(-1.0, 512.0)), min_size=1, max_size=8),
       st.sampled_from([0.5, 1.0, 3.0, 1e-300, 0.0, float("inf"), float("nan")]),
       st.sampled_from([1.0, 4.0, 0.0, float("inf")]))
def test_task_fit_counts_without_errstate_is_with_it(free: list[tuple[float, float]], cpus: float, mem: float) -> None:
    """`task_fit_counts` skips np.errstate for a finite, positive shape: the counts it gives are those
    of the divisions under errstate, for every shape."""
    import warnings
    from types import SimpleNamespace

    from disagg.placement.commit import EPS
    from disagg.placement.queue import task_fit_counts

    state = SimpleNamespace(cpu=np.array([c for c, _ in free]), mem=np.array([m for _, m in free]))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        by_cpu, by_mem = np.floor((state.cpu + EPS) / cpus), np.floor((state.mem + EPS) / mem)
        want = np.maximum(np.minimum(by_cpu, by_mem), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (a cast of inf or NaN, either way)
        assert task_fit_counts(state, cpus, mem).tolist() == want.astype(np.int64).tolist()  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(_machine_columns())
def test_a_machine_class_takes_its_machines_in_turn_across_racks(case: tuple[list[np.ndarray], np.ndarray]) -> None:
    """`MachineGroups.of` lists each class's machines as a Python walk would: by their rank among the
    class's machines of their own rack (machine order), then by rack; and its spans' bounds are the
    classes' sizes summed."""
    from disagg.placement.phase_one import MachineGroups

    columns, rack = case
    groups = MachineGroups.of(columns, rack)
    of_machine, racks = groups.of_machine.tolist(), rack.tolist()
    want: list[list[int]] = []
    for c in range(len(groups.first)):
        seen: dict[int, int] = {}
        ranked = []
        for m in (m for m in range(len(racks)) if of_machine[m] == c):
            ranked.append((seen.get(racks[m], 0), racks[m], m))
            seen[racks[m]] = seen.get(racks[m], 0) + 1
        want.append([m for _, _, m in sorted(ranked)])
    assert groups.members == want
    sizes = [len(ms) for ms in want]
    assert groups.member_arrays._bounds == [sum(sizes[:k]) for k in range(len(sizes) + 1)]
