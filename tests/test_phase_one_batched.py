"""Phase 1's pricing of a round's shapes all at once (`phase_one.class_costs`, `phase_one.shape_costs`: the
arcs as flat pairs, in one cost-model call; `phase_one.machine_costs`: both in one) against each shape's own
call."""

from __future__ import annotations

import pytest


def _simulate(policy: str) -> None:
    from disagg.placement.registry import get_policy
    from disagg.sim.engine import SimConfig, simulate
    from disagg.sim.scenarios import get_scenario

    scenario = get_scenario("paper-16m-512j")
    cluster = scenario.cluster()
    simulate(cluster, scenario.submissions(1, cluster), get_policy(policy), 1, SimConfig(interval_s=5.0))


@pytest.mark.parametrize("policy", ["drmaestro-na", "drmaestro"])
def test_class_costs_of_several_shapes_at_once_are_each_shapes_own(policy: str, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    """Each shape's matrices (costs and holds) are what `task_to_machine` gives its classes and head
    alone, in every phase 1 of a simulated run (some of several shapes, some of one)."""
    from disagg.placement import phase_one

    batched = phase_one.class_costs
    seen = {"shapes": 0, "several": 0}

    def checked(rows, shapes, heads, costs):  # type: ignore[no-untyped-def]
        got = batched(rows, shapes, heads, costs)
        for members, head, arcs in zip(shapes, heads, got, strict=True):
            want = costs.task_to_machine(phase_one._rows_of(rows, members), head)
            assert arcs.cost.tolist() == want.cost.tolist()
            assert (arcs.hold is None or not arcs.hold.any()) if want.hold is None else (
                arcs.hold is not None and arcs.hold.tolist() == want.hold.tolist())
        seen["shapes"] += len(shapes)
        seen["several"] += len(shapes) > 1
        return got

    monkeypatch.setattr(phase_one, "class_costs", checked)
    monkeypatch.setattr(phase_one, "CLASS_HEAD", 8)  # (heads cut from the candidates: `machine_costs` not used)
    _simulate(policy)
    assert seen["several"] >= 1 and seen["shapes"] > seen["several"]


@pytest.mark.parametrize("policy", ["drmaestro-na", "drmaestro"])
def test_shape_costs_of_several_shapes_at_once_are_each_shapes_own(policy: str, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    """Each shape's aggregator prices are what `shape_to_machine` gives its first class alone."""
    from disagg.placement import phase_one

    batched = phase_one.shape_costs
    seen = {"several": 0}

    def checked(rows, rep_ids, columns, costs):  # type: ignore[no-untyped-def]
        got = batched(rows, rep_ids, columns, costs)
        assert len(got) == len(columns)
        for rep, machines, proxy in zip(rep_ids, columns, got, strict=True):
            want = costs.shape_to_machine(phase_one._rows_of(rows, [rep]), machines).cost
            assert want.shape == (1, len(machines.share)) and proxy.tolist() == want[0].tolist()
        seen["several"] += len(columns) > 1
        return got

    monkeypatch.setattr(phase_one, "shape_costs", checked)
    monkeypatch.setattr(phase_one, "CLASS_HEAD", 8)
    _simulate(policy)
    assert seen["several"] >= 1


@pytest.mark.parametrize("policy", ["drmaestro-na", "drmaestro"])
def test_machine_costs_are_each_shapes_own(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The aggregators' prices and the classes' matrices that `machine_costs` gives in one call (a cluster
    no larger than a head) are what `shape_to_machine` gives each shape's first class and `task_to_machine`
    its classes alone, in every phase 1 of a simulated run (some of several shapes, some of one)."""
    from disagg.placement import phase_one

    batched = phase_one.machine_costs
    seen = {"shapes": 0, "several": 0, "held": 0}

    def checked(rows, rep_ids, shapes, columns, costs):  # type: ignore[no-untyped-def]
        proxies, got = batched(rows, rep_ids, shapes, columns, costs)
        assert len(proxies) == len(got) == len(shapes)
        for rep, members, machines, proxy, arcs in zip(rep_ids, shapes, columns, proxies, got, strict=True):
            want_proxy = costs.shape_to_machine(phase_one._rows_of(rows, [rep]), machines).cost
            assert proxy.tolist() == want_proxy[0].tolist()
            want = costs.task_to_machine(phase_one._rows_of(rows, members), machines)
            assert arcs.cost.tolist() == want.cost.tolist()
            assert (arcs.hold is None or not arcs.hold.any()) if want.hold is None else (
                arcs.hold is not None and arcs.hold.tolist() == want.hold.tolist())
            seen["held"] += want.hold is not None
        seen["shapes"] += len(shapes)
        seen["several"] += len(shapes) > 1
        return proxies, got

    monkeypatch.setattr(phase_one, "machine_costs", checked)
    _simulate(policy)
    assert seen["several"] >= 1 and seen["shapes"] > seen["several"]
    assert seen["held"] >= 1 if policy == "drmaestro-na" else seen["held"] == 0


@pytest.mark.parametrize("policy", ["drmaestro-na", "firmament"])
def test_capped_arcs_are_within_capacitys_cut(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small cluster's decoder cuts the flows to machine classes in Python (`_capped_arcs`) as
    `within_capacity` does over every arc: the same arcs with flow, in order, with the same cut flows."""
    from disagg.placement import phase_one

    capped = phase_one._capped_arcs
    seen = {"phases": 0}

    def checked(n, cls, pricing, pref, shared, f_pref, f_shared):  # type: ignore[no-untyped-def]
        got = capped(n, cls, pricing, pref, shared, f_pref, f_shared)
        c_pref, c_shared = phase_one.within_capacity(n, cls, pricing, pref, shared, f_pref, f_shared)
        class_shape = {c: g for g, members in enumerate(cls.shapes) for c in members}
        want = [[[t, class_shape[t], node, cost, f] for t, node, cost, f in
                 zip(pref[0].tolist(), pref[1].tolist(), pref[3].tolist(), c_pref.tolist(), strict=True) if f],
                [[t, t, node, cost, f] for t, node, cost, f in
                 zip(shared[0].tolist(), shared[1].tolist(), shared[3].tolist(), c_shared.tolist(), strict=True) if f]]
        assert got == want
        seen["phases"] += 1
        return got

    monkeypatch.setattr(phase_one, "_capped_arcs", checked)
    _simulate(policy)
    assert seen["phases"] >= 1
