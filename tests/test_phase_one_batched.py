"""Phase 1's pricing of a round's shapes all at once (`phase_one.class_costs`) against each shape's own."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("policy", ["drmaestro-na", "drmaestro"])
def test_class_costs_of_several_shapes_at_once_are_each_shapes_own(policy: str, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    """`phase_one.class_costs` prices every shape's classes of a phase 1 in one call, as flat pairs: each
    shape's matrices (costs and holds) are what `task_to_machine` gives its classes and head alone, in
    every phase 1 of a simulated run (some of several shapes, some of one)."""
    from disagg.placement import phase_one
    from disagg.placement.cost_models import ClassRows
    from disagg.placement.jobstate import profile_arrays
    from disagg.placement.registry import get_policy
    from disagg.sim.engine import SimConfig, simulate
    from disagg.sim.scenarios import get_scenario

    batched = phase_one.class_costs
    seen = {"shapes": 0, "several": 0}

    def checked(cls, shapes, heads, costs):  # type: ignore[no-untyped-def]
        got = batched(cls, shapes, heads, costs)
        for members, head, arcs in zip(shapes, heads, got, strict=True):
            reps = [cls.representative[c] for c in members]
            want = costs.task_to_machine(ClassRows.of(profile_arrays(reps), reps), head)
            assert arcs.cost.tolist() == want.cost.tolist()
            assert (arcs.hold is None or not arcs.hold.any()) if want.hold is None else (
                arcs.hold is not None and arcs.hold.tolist() == want.hold.tolist())
        seen["shapes"] += len(shapes)
        seen["several"] += len(shapes) > 1
        return got

    monkeypatch.setattr(phase_one, "class_costs", checked)
    scenario = get_scenario("paper-16m-512j")
    cluster = scenario.cluster()
    simulate(cluster, scenario.submissions(1, cluster), get_policy(policy), 1, SimConfig(interval_s=5.0))
    assert seen["several"] >= 1 and seen["shapes"] > seen["several"]
