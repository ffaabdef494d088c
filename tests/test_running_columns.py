"""What runs, carried from one round's snapshot to the next (`placement.running.allocation_columns`):
the columns of allocations that stay are gathered, not read again, and a round's free state built on
them has the very floats (cpus, memory, link sums) and devices of one that read every allocation afresh,
whichever allocations end, start or change places between rounds."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disagg.model import Allocation, Cluster, Machine
from disagg.placement.running import allocation_columns, forget_kept_allocations, read_allocation_columns
from disagg.placement.state import FreeState, inventory_arrays
from tests.strategies import clusters


@st.composite
def _allocation(draw: st.DrawFn, cluster: Cluster) -> Allocation:
    """A running task on one of the cluster's machines: uneven floats (so that the order of the sums
    shows), devices anywhere (local, in a pool, or one the inventory does not list, which carries no
    traffic: a free state refuses that), traffic or none."""
    ids = [d.id for d in cluster.devices]
    devices = draw(st.lists(st.sampled_from(ids), max_size=3, unique=True)) if ids else []
    gbps = draw(st.sampled_from([0.0, 0.3, 1.1, 2.7]))
    if gbps == 0.0 and draw(st.booleans()):
        devices.append("ghost")
    return Allocation(f"j{draw(st.integers(0, 9))}", draw(st.sampled_from([m.name for m in cluster.machines])),
                      draw(st.sampled_from([0.1, 0.3, 1.7, 2.0])), draw(st.sampled_from([0.7, 3.3, 8.0])),
                      tuple(devices), gbps)


@st.composite
def _rounds(draw: st.DrawFn) -> tuple[Cluster, list[tuple[Allocation, ...]]]:
    """A cluster and the allocations of a few rounds: each round ends some of the last one's (the
    records that stay are the same objects), starts new ones at the end, and now and then reorders."""
    cluster = draw(clusters())
    now: list[Allocation] = list(cluster.allocations)
    rounds = [tuple(now)]
    for _ in range(draw(st.integers(1, 5))):
        now = [a for a in now if draw(st.booleans())]
        now += draw(st.lists(_allocation(cluster), max_size=6))
        if draw(st.integers(0, 3)) == 0:
            now = draw(st.permutations(now))
        rounds.append(tuple(now))
    return cluster, rounds


def _free(cluster: Cluster) -> tuple[object, ...]:
    fs = FreeState(cluster)
    return (fs.cpu.tobytes(), fs.mem.tobytes(), fs.link_used.tobytes(),
            {k: (v.tolist(), fs.free_count[k].tolist()) for k, v in fs.slots.items()})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=_rounds())
def test_carried_columns_and_free_states_equal_those_read_afresh(
        rounds: tuple[Cluster, list[tuple[Allocation, ...]]]) -> None:
    cluster, allocations = rounds
    forget_kept_allocations()
    for now in allocations:
        snap = replace(cluster, allocations=now)
        inv = inventory_arrays(snap)
        carried = allocation_columns(now, inv.loc_index, inv.dev_index)
        fresh = read_allocation_columns(now, inv.loc_index, inv.dev_index)
        for f in fields(carried):
            a, b = getattr(carried, f.name), getattr(fresh, f.name)
            assert (np.array_equal(a, b) and a.dtype == b.dtype) if isinstance(a, np.ndarray) else a == b, f.name
        warm = _free(snap)
        forget_kept_allocations()
        assert warm == _free(snap)


def test_columns_are_carried_not_read_again() -> None:
    """A record that stays is gathered from the last columns: changing what a lookup would read
    (here, the index of its machine) shows in new records only."""
    a, b = Allocation("a", "m0", 1.0, 1.0), Allocation("b", "m1", 2.0, 2.0)
    loc, dev = {"m0": 0, "m1": 1}, {}
    forget_kept_allocations()
    allocation_columns((a,), loc, dev)
    loc["m0"] = 5  # (a lie, to tell a gather from a read)
    cols = allocation_columns((b, a), loc, dev)
    assert cols.machine.tolist() == [1, 0]
    with pytest.raises(ValueError):
        cols.cpus[0] = 0.0  # kept for the next round: read-only
    forget_kept_allocations()


def test_traffic_to_a_device_the_inventory_lacks_is_refused_as_before() -> None:
    running = Allocation("a", "m0", 0.0, 0.0, ("ghost",), 1.0)
    snap = Cluster((Machine("m0", "r0", 8, 64.0, 10.0),), (), (), 10.0, (running,))
    forget_kept_allocations()
    with pytest.raises(KeyError, match="ghost"):
        FreeState(snap)
