"""What a round keeps of an inventory between rounds (`placement.state.inventory_arrays`): rounds on
the same inventory with other allocations, on devices whose health changed and behind other down links
decide exactly as rounds that read everything afresh."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disagg.model import Cluster, Job
from disagg.placement.registry import get_policy
from disagg.placement.state import FreeState, forget_kept_inventory, inventory_arrays
from tests.strategies import clusters, queues

POLICIES = ("drmaestro", "drmaestro-na", "firmament", "greedy", "fifo")


def _decide(name: str, cluster: Cluster, queue: list[Job], cold: bool) -> tuple[object, object]:
    if cold:
        forget_kept_inventory()
    d = get_policy(name).place(cluster, queue, 100.0, np.random.default_rng(1))
    return d.placed, d.unplaced


def _changes(cluster: Cluster, draw: st.DrawFn) -> list[Cluster]:
    """The snapshots a controller might see next: other allocations on the same inventory (the same
    tuples), a device failed or healed (a new devices tuple), a link down (down links by value)."""
    out = [replace(cluster, allocations=cluster.allocations[: draw(st.integers(0, len(cluster.allocations)))])]
    if cluster.devices:
        i = draw(st.integers(0, len(cluster.devices) - 1))
        flipped = "failed" if cluster.devices[i].health == "healthy" else "healthy"
        devices = (*cluster.devices[:i], replace(cluster.devices[i], health=flipped), *cluster.devices[i + 1:])
        out.append(replace(cluster, devices=devices))
    out.append(replace(cluster, down_links=frozenset({f"up:{cluster.machines[0].name}"})))
    out.append(replace(cluster))  # back to the first: the same tuples again
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), queue=queues(), data=st.data(), name=st.sampled_from(POLICIES))
def test_rounds_on_a_kept_inventory_decide_as_rounds_that_read_it_afresh(
        cluster: Cluster, queue: list[Job], data: st.DataObject, name: str) -> None:
    snapshots = [cluster, *_changes(cluster, data.draw)]
    warm = [_decide(name, s, queue, cold=False) for s in snapshots]
    cold = [_decide(name, s, queue, cold=True) for s in snapshots]
    assert warm == cold


@settings(max_examples=20, deadline=None)
@given(cluster=clusters())
def test_the_kept_arrays_are_shared_read_only_and_follow_the_inventory(cluster: Cluster) -> None:
    forget_kept_inventory()
    first = inventory_arrays(cluster)
    assert inventory_arrays(replace(cluster, allocations=())) is first  # same tuples: kept
    with pytest.raises(ValueError):
        first.cpu_total[0] = -1.0  # shared by the next round: a write must fail, not leak
    state = FreeState(cluster)
    state.cpu[:] = 0.0  # what a round takes is its own
    assert inventory_arrays(cluster).cpu_total.sum() == sum(m.cpus for m in cluster.machines)
    if cluster.devices:  # (the empty tuple is one object: the same inventory)
        other_devices = tuple(replace(d) for d in cluster.devices)
        assert inventory_arrays(replace(cluster, devices=other_devices)) is not first
    downed = replace(cluster, down_links=frozenset({f"up:{cluster.machines[0].name}"}))
    assert inventory_arrays(downed) is not inventory_arrays(cluster)


def test_a_local_grant_is_made_once_per_device_and_handed_out_by_every_round() -> None:
    from disagg.bench.synthetic import rodinia_queue, synthetic_cluster

    cluster, queue = synthetic_cluster(40, 4, 1), rodinia_queue(30, 1)
    forget_kept_inventory()
    a = get_policy("drmaestro").place(replace(cluster), queue, 0.0, np.random.default_rng(1))
    b = get_policy("drmaestro").place(replace(cluster), queue, 0.0, np.random.default_rng(1))
    local_a = {g.id: g for p in a.placed for t in p.tasks for g in t.devices if not g.remote}
    local_b = {g.id: g for p in b.placed for t in p.tasks for g in t.devices if not g.remote}
    assert local_a and local_a.keys() == local_b.keys()
    assert all(local_a[k] is local_b[k] for k in local_a)  # the same objects: none made anew
    devices = {d.id: d for d in cluster.devices}
    assert all((g.kind, g.location) == (devices[k].kind, devices[k].location) for k, g in local_a.items())


def test_the_kept_link_names_location_index_and_models_are_the_snapshots_own() -> None:
    """The link names, the location index and the devices' models a round reads off the kept inventory
    are those each snapshot would make itself; a held device the inventory does not list is passed over."""
    from disagg.bench.synthetic import synthetic_cluster
    from disagg.model import Allocation

    cluster = synthetic_cluster(40, 4, 1)
    forget_kept_inventory()
    first = FreeState(replace(cluster))
    names = first.link_names
    later = FreeState(replace(cluster))
    assert later.link_names is names  # kept: made once
    assert later.link_index is first.link_index == {name: i for i, name in enumerate(names)}
    assert names == [f"up:{x}" for x in cluster.locations] + [f"rack:{r}" for r in cluster.racks]
    assert later.inventory.loc_index == {x: i for i, x in enumerate(cluster.locations)}
    shape = (2.0, 8.0, (("gpu", 1),), ())
    fit = first.idle_local_fit(shape)
    assert later.inventory.idle_fit == {shape: fit}  # kept: computed once for every round on the inventory
    forget_kept_inventory()
    assert FreeState(replace(cluster)).idle_local_fit(shape) == fit  # what a fresh inventory computes
    models = first.free_by_model("gpu")[0]
    assert later.free_by_model("gpu")[0] is models  # kept: read once
    assert models == sorted({d.model for d in cluster.devices if d.kind == "gpu"})
    held = cluster.devices[0]
    machine = cluster.machines[0].name
    idle = FreeState(replace(cluster, allocations=()))
    state = FreeState(replace(cluster, allocations=(
        Allocation("a", machine, 1.0, 1.0, devices=(held.id, "no-such-device")),)))
    assert state.cpu[0] == idle.cpu[0] - 1.0
    assert int(state.free_count[held.kind].sum()) == int(idle.free_count[held.kind].sum()) - 1


def test_the_traffic_checks_with_exceeds_inlined_answer_as_exceeds_does() -> None:
    """`fits_traffic` and `take_traffic` compare with `EPS` inline: the same answers as `exceeds` per link,
    at the boundary (within EPS), beyond it, and with NaN loads (a NaN never exceeds)."""
    import math
    import random

    from disagg.bench.synthetic import synthetic_cluster
    from disagg.placement.commit import EPS, exceeds
    from disagg.placement.state import Journal

    rng = random.Random(3)
    state = FreeState(synthetic_cluster(8, 2, 1))
    n = len(state.link_cap)
    for _ in range(300):
        state.link_used[:] = [rng.choice((0.0, 1.0, 5.0, 10.0, math.nan)) for _ in range(n)]
        links = tuple(rng.sample(range(n), rng.randrange(1, 4)))
        gbps = rng.choice((0.5, 1.0, 5.0 + EPS / 2, 5.0 + 2 * EPS, 10.0, math.nan))
        want = all(not exceeds(state.link_used[k] + gbps, state.link_cap[k]) for k in links)
        assert state.fits_traffic(links, gbps) == want
        before = state.link_used.copy()
        assert state.take_traffic(links, gbps, Journal()) == want
        if not want:
            assert np.array_equal(state.link_used, before, equal_nan=True)


def test_the_kept_idle_fits_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inventory keeps at most IDLE_FIT_KEPT shapes' idle fits (requests are the tenants' to choose):
    past that it starts over, and a fit is what it was."""
    from disagg.bench.synthetic import synthetic_cluster
    from disagg.placement import state as state_module

    monkeypatch.setattr(state_module, "IDLE_FIT_KEPT", 3)
    forget_kept_inventory()
    state = FreeState(synthetic_cluster(8, 2, 1))
    fits = [state.idle_local_fit((float(c), 8.0, (("gpu", 1),), ())) for c in range(1, 6)]
    assert len(state.inventory.idle_fit) <= 3
    assert [state.idle_local_fit((float(c), 8.0, (("gpu", 1),), ())) for c in range(1, 6)] == fits
