"""What a down link cuts off (`model.cluster.Reach`), and that no policy is offered a path through it
(issue 21, reproduction 1: the policy's snapshot must know what the commit knows)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from disagg.model import Reach
from disagg.placement.registry import POLICIES
from tests.builders import make_cluster, make_job
from tests.harness import PlacementHarness


def test_a_down_link_cuts_off_what_is_behind_it() -> None:
    where = [("m0", "r0"), ("m1", "r1"), ("box0", "r0")]
    assert Reach.of([], where).behind == {}
    assert dict(Reach.of(["up:m0"], where).behind) == {"m0": "up:m0"}
    assert dict(Reach.of(["rack:r0"], where).behind) == {"m0": "rack:r0", "box0": "rack:r0"}
    both = Reach.of(["rack:r0", "up:m0"], where)
    assert both.link_to("m0") == "up:m0" and both.link_to("box0") == "rack:r0" and both.reachable("m1")


@pytest.mark.parametrize("down", [{"up:m0"}, {"up:box0"}, {"rack:r1"}, {"up:m2", "up:box1"}])
@pytest.mark.parametrize("policy", list(POLICIES))
def test_no_policy_places_behind_a_down_link(policy: str, down: set[str]) -> None:
    """m0 is the idlest machine (the others are busy) and the only one with local GPUs free: every policy
    wants it. With a link down, nothing a policy proposes may need that link."""
    cluster = make_cluster(machines=4, gpus=1, cpus=20, pools=2, pool_gpus=4, racks=2,
                           taken_cpus={"m1": 12, "m2": 12, "m3": 12})
    cluster = replace(cluster, down_links=frozenset(down))
    jobs = [make_job(f"j{i}", gpu=1, cpus=4, memory_gb=8) for i in range(6)]
    decisions = PlacementHarness(cluster, jobs).run(policy)
    where = cluster.reach
    by_id = cluster.device_by_id
    for p in decisions.placed:
        for t in p.tasks:
            assert where.reachable(t.machine), (policy, p.job, t.machine)
            for g in t.devices:
                assert where.reachable(by_id[g.id].location), (policy, p.job, g.id)
                assert not set(g.path) & down, (policy, p.job, g.path)
    assert decisions.placed or policy in ("firmament", "greedy"), (policy, decisions.unplaced)
