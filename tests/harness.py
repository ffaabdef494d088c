"""PlacementHarness: runs any registered policy on a snapshot and checks its decisions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from disagg.model import Cluster, Job
from disagg.placement import Decisions, Reason
from disagg.placement.registry import get_policy
from tests.invariants import check_decisions

SERVER_CENTRIC = {"firmament", "greedy"}


@dataclass
class PlacementHarness:
    cluster: Cluster
    queue: Sequence[Job]
    now: float = 0.0
    seed: int = 0

    def run(self, policy: str) -> Decisions:
        decisions = get_policy(policy).place(self.cluster, self.queue, self.now, np.random.default_rng(self.seed))
        assert decisions.policy == policy
        check_decisions(self.cluster, self.queue, decisions, server_centric=policy in SERVER_CENTRIC)
        return decisions


def placed(decisions: Decisions) -> dict[str, list[tuple[str, list[tuple[str, bool]]]]]:
    return {p.job: [(t.machine, [(d.id, d.remote) for d in t.devices]) for t in p.tasks] for p in decisions.placed}


def reason(decisions: Decisions, job: str) -> tuple[Reason, str]:
    for u in decisions.unplaced:
        if u.job == job:
            return u.reason, u.message
    raise AssertionError(f"{job} was placed")
